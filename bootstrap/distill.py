"""`kernelzero distill --modules N --out DIR`: verified SFT sets for both roles from the teachers, split by the held-out protocol; the teachers' answers are checked in process, a random share of them audited by the contained evaluator.

The synthesizer (the Proposer's teacher) writes N modules from API sets drawn from the pool, each at a
size of its own, so that a model learns to read sizes from the prompt rather than recall them. The Triton
lowering (the Coder's teacher) answers each. Both teachers are our own code, so their output is checked
where it is made, by the cheap trusted check (bootstrap/teacher_check.py: the answer run across all rows
at once in torch, against the module, on two seeds) in a pool of worker processes; what the check cannot
see, the audit measures: `audit_share` of the checked answers, drawn at random, go through the real
evaluator, contained as any candidate, and every disagreement is counted and reported. The audit measures the
check and drops nothing (the rows it does not draw would keep the same faults), so the sets are written before it
judges, and work that needs only them (the bootstrap's SFT, with a GPU) runs beside it. A module whose answer passes is a Coder
row and a Proposer row. Whole API combinations are held out
(kernelzero/kit/heldout_protocol.py): a held-out combination is in neither role's training rows.

Model output never comes here: only teacher output runs in this process. The four JSON-lines sets and
distill.json are written whole or not at all, distill.json last (it marks the distillation done); an interrupted
run starts over (it takes minutes). It does
not promise N rows: the report says how many modules lowered and checked.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import msgspec

from kernelzero.config import Config
from kernelzero.kit.codeblocks import answer as code_block
from kernelzero.kit.heldout_protocol import MIN_MODULES, held_out_combinations
from kernelzero.schemas import api_set_key

FILES = ("coder_train", "coder_heldout", "proposer_train", "proposer_heldout")
SIZES = 4  # each module's element budget is the configured scale over 1, 2, 4 or 8


class ModuleSpec(msgspec.Struct, frozen=True, array_like=True):
    apis: list[str]
    seed: int
    scale: float


class Made(msgspec.Struct, kw_only=True):
    """One module as the teachers made it: the row's parts, or why there is no row."""

    spec: ModuleSpec
    module: str = ""
    answer: str = ""  # the lowering's candidate source
    failed: str = ""  # "synthesis", "declined:OP", "check: ..." or "raised: ERROR"; "" for a row


class Disagreement(msgspec.Struct):
    module_id: str
    verdict: str
    reason: str
    evidence: dict[str, str] = {}  # the evaluator's, each value cut to 300 characters


class DistillReport(msgspec.Struct, kw_only=True):
    modules: int  # synthesized or tried
    rows: dict[str, int]  # per file of FILES
    heldout_sets: list[str]
    failed: dict[str, int]  # why a module gave no row, by reason
    audited: int
    disagreements: list[Disagreement]
    api_pool: list[str]
    seconds: float


def add_arguments(parser) -> None:
    parser.add_argument("--modules", type=int, required=True, metavar="N", help="modules the synthesizer writes")
    parser.add_argument("--out", required=True, metavar="DIR", help="the output directory (sets and distill.json)")
    parser.add_argument("--heldout-share", type=float, default=0.2, metavar="F",
                        help="share of multi-API combinations held out of both roles' training rows (default 0.2)")
    parser.add_argument("--audit-share", type=float, default=0.02, metavar="F",
                        help="share of checked answers also judged by the contained evaluator (default 0.02)")
    parser.add_argument("--workers", type=int, default=None, metavar="W",
                        help="processes making the rows, and the audit's evaluator workers without a GPU "
                             "(default: CPU count)")


def api_pool(config: Config) -> list[str]:
    """The configured [proposer] apis, or every catalog API the Coder's teacher lowers on its own."""
    if config.proposer.apis:
        return list(config.proposer.apis)
    from kernelzero.bootstrap.teacher import api_support

    return sorted(api for api, why in api_support().items() if not why)


def plan(pool: Sequence[str], n: int, *, low: int, high: int, scale: float, seed: int) -> list[ModuleSpec]:
    """N module specs: a set size in [low, high] (at most the pool) drawn in proportion to itself, its APIs, a seed
    and a size. Larger sets have many more distinct combinations, so drawing sizes uniformly would spend most single
    APIs on modules already made."""
    rng = random.Random(f"distill:{seed}")
    sizes = list(range(max(1, low), max(1, low, high) + 1))
    specs = []
    for index in range(n):
        size = min(len(pool), rng.choices(sizes, weights=sizes)[0])
        specs.append(ModuleSpec(apis=rng.sample(list(pool), size), seed=index,
                                scale=scale / (1 << rng.randrange(SIZES))))
    return specs


def make(spec: ModuleSpec) -> Made:
    """In a worker: the synthesizer's module and the lowering's answer for one spec, checked."""
    from kernelzero.producers.synthesizer import SynthesisError, synthesize
    from kernelzero.bootstrap.teacher import NotLowerable, lower
    from kernelzero.bootstrap.teacher_check import CheckFailed, check

    try:
        module = synthesize(spec.apis, seed=spec.seed, scale=spec.scale).source
    except SynthesisError:
        return Made(spec=spec, failed="synthesis")
    try:
        answer = lower(module)
    except NotLowerable as exc:
        return Made(spec=spec, module=module, failed=f"declined:{exc.op}")
    try:
        check(module, answer)
    except CheckFailed as exc:
        return Made(spec=spec, module=module, answer=answer, failed=f"check: {str(exc)[:80]}")
    except Exception as exc:  # noqa: BLE001  torch refusing the module's own inputs (a loss given a negative
        # variance) must not end the whole distillation: the row is dropped and counted under its error's type
        return Made(spec=spec, module=module, answer=answer, failed=f"raised: {type(exc).__name__}")
    return Made(spec=spec, module=module, answer=answer)


def _worker_start() -> None:
    import torch

    torch.set_num_threads(1)


def counting_bars(**options: Any) -> Any:
    """Rich bars of done/total and the time since each started: a finished bar says how long its phase took."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), **options)


def make_all(specs: list[ModuleSpec], workers: int, progress: Any) -> list[Made]:
    """Every spec through `make`, in spec order, over `workers` forked processes."""
    import multiprocessing

    task = progress.add_task("synthesizing, lowering, checking", total=len(specs))
    made: list[Made] = []
    with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_start) as pool:
        for result in pool.imap(make, specs, chunksize=16):
            made.append(result)
            progress.advance(task)
    return made


def _module_id(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def audit(config: Config, rows: list[Made], share: float, seed: int, progress: Any,
          processes: int) -> tuple[list[Disagreement], int]:
    """(every verdict but `correct`, how many were judged) for a random `share` of the rows (at least one), judged by the contained evaluator.

    Without a GPU it judges with `processes` workers (on a 2-core CPU alone, two halved the audit's wall: 42 answers,
    41 s with one, 20 s with two); with one it takes the workers per GPU of [evaluator]. It judges correctness, so
    untimed (pool.evaluate's `timed`): timed, the GPU's turns made it about 10 s a row a worker on an H100.
    """
    import anyio

    from kernelzero.gpu_workers import EvaluatorPool

    rng = random.Random(f"audit:{seed}")
    picked = rng.sample(rows, min(len(rows), max(1, round(share * len(rows))))) if share > 0 and rows else []
    task = progress.add_task("auditing with the contained evaluator", total=len(picked))
    found: list[Disagreement] = []

    async def run() -> None:
        evaluator = msgspec.structs.replace(config.evaluator, cpu_workers=processes)
        async with EvaluatorPool(evaluator, use_cache=False) as pool:
            async def judge(row: Made) -> None:
                result = await pool.evaluate(row.module, row.answer, timed=False)
                if result.verdict != "correct":
                    found.append(Disagreement(_module_id(row.module), result.verdict, result.reason,
                                              {k: str(v)[:300] for k, v in result.evidence.items()}))
                progress.advance(task)

            async with anyio.create_task_group() as group:
                for row in picked:
                    group.start_soon(judge, row)

    anyio.run(run)
    return found, len(picked)


def rows_for(made: list[Made], config: Config, heldout: set[str]) -> dict[str, list[dict]]:
    """The four sets: one Coder and one Proposer row per distinct module with a checked answer."""
    from kernelzero.kit.coder_prompts import render_coder_prompt
    from kernelzero.producers.proposer import build_prompt

    out: dict[str, list[dict]] = {name: [] for name in FILES}
    for row in made:
        split = "heldout" if api_set_key(row.spec.apis) in heldout else "train"
        base = {"module_id": _module_id(row.module), "apis": row.spec.apis, "reference": row.module}
        out[f"coder_{split}"].append({**base, "completion": code_block(row.answer),
                                      "prompt": render_coder_prompt(row.module, config.coder.target,
                                                                    style=config.coder.prompt)})
        out[f"proposer_{split}"].append({**base, "completion": code_block(row.module),
                                         "prompt": build_prompt(row.spec.apis, row.spec.scale, config.proposer.prompt)})
    return out


def write_jsonl(path: Path, rows: list[dict]) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(partial, path)


def _distinct(made: list[Made]) -> list[Made]:
    seen: set[str] = set()
    rows = []
    for row in made:
        if not row.failed and row.module not in seen:
            seen.add(row.module)
            rows.append(row)
    return rows


def make_sets(config: Config, out: Path, n: int, heldout_share: float, workers: int,
              set_sizes: tuple[int, int] | None, progress: Any) -> tuple[DistillReport, list[Made]]:
    """Make, check and split N modules of API sets of `set_sizes` (fewest, most; default the [proposer] settings');
    write the four sets into `out`. The report's audit is empty, its seconds the making's; the rows are the audit's
    to draw from."""
    started = time.monotonic()
    pool = api_pool(config)
    proposer = config.proposer
    low, high = set_sizes or (proposer.min_api_set_size or proposer.api_set_size, proposer.api_set_size)
    made = make_all(plan(pool, n, low=low, high=high, scale=proposer.scale, seed=proposer.seed), workers, progress)
    rows = _distinct(made)
    heldout = held_out_combinations([row.spec.apis for row in rows], heldout_share, proposer.seed)
    sets = rows_for(rows, config, heldout)
    out.mkdir(parents=True, exist_ok=True)
    for name, content in sets.items():
        write_jsonl(out / f"{name}.jsonl", content)
    failed: dict[str, int] = {}
    for row in made:
        if row.failed:
            failed[row.failed] = failed.get(row.failed, 0) + 1
    report = DistillReport(modules=n, rows={name: len(content) for name, content in sets.items()},
                           heldout_sets=sorted(heldout), failed=dict(sorted(failed.items(), key=lambda kv: -kv[1])),
                           audited=0, disagreements=[], api_pool=pool, seconds=round(time.monotonic() - started, 1))
    return report, rows


def distill(config: Config, out: Path, n: int, heldout_share: float, audit_share: float = 0.02,
            workers: int | None = None, set_sizes: tuple[int, int] | None = None,
            beside: Callable[[Path, Any], None] | None = None, audit_after: threading.Event | None = None,
            audit_workers: int | None = None) -> DistillReport:
    """The sets (`make_sets`) and their audit, then distill.json into `out`. `beside(out, progress)`, if given, runs
    in this thread once the sets are written, while the audit judges in another (the bootstrap's SFT); the audit
    starts when `audit_after` is set (if given; at the latest when `beside` ends), with `audit_workers` (default: the
    making's) where there is no GPU. The report is written when both are done."""
    started = time.monotonic()
    processes = workers or os.cpu_count() or 1

    def audit_when_free() -> tuple[list[Disagreement], int]:
        if audit_after is not None:
            audit_after.wait()
        return audit(config, rows, audit_share, config.proposer.seed, progress, audit_workers or processes)

    with counting_bars() as progress:
        report, rows = make_sets(config, out, n, heldout_share, processes, set_sizes, progress)
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="audit") as thread:
            audited = thread.submit(audit_when_free)
            try:
                if beside is not None:
                    beside(out, progress)
            finally:
                if audit_after is not None:
                    audit_after.set()  # never later than the work beside: one that failed or was cached set nothing
                disagreements, judged = audited.result()
    report = msgspec.structs.replace(report, audited=judged, disagreements=disagreements,
                                     seconds=round(time.monotonic() - started, 1))
    (out / "distill.json").write_text(msgspec.json.format(msgspec.json.encode(report)).decode())
    return report


def main(args, config: Config) -> int:
    if args.modules < 1 or not 0.0 <= args.heldout_share < 1.0 or not 0.0 <= args.audit_share <= 1.0:
        print("kernelzero distill: --modules must be >= 1, --heldout-share in [0, 1) and --audit-share in [0, 1]",
              file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print("kernelzero distill: --workers must be >= 1", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    report = distill(config, out, args.modules, args.heldout_share, args.audit_share, args.workers)
    print(f"distill: {report.modules} modules, rows {report.rows}; held-out combinations {len(report.heldout_sets)}; "
          f"audited {report.audited}, disagreements {len(report.disagreements)}; {report.seconds:.0f} s; "
          f"report in {out / 'distill.json'}")
    if report.rows["coder_heldout"] < MIN_MODULES:
        print(f"distill: only {report.rows['coder_heldout']} held-out Coder rows; the held-out protocol wants "
              f"{MIN_MODULES} (distill more modules)", file=sys.stderr)
    return 0
