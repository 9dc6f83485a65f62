"""`kernelzero distill --modules N --out DIR`: verified SFT sets for both roles from the teachers, split by API set; resumable.

The real stages run on the run's own embedded log (OUT/log.sqlite): the synthesizer proposes N
modules (the Proposer's teacher), the validator judges them (duplicates kept), the Triton lowering
(producers/teacher.py, the Coder's teacher) answers each accepted one, and the evaluator judges
every answer. Only `correct` answers become Coder rows, exactly the rows `kernelzero replay
--kind sft` gives on that log; every accepted module becomes a Proposer row (its prompt, and the
module as the Proposer's parser reads it). API sets are held out whole: a held-out set appears in
neither role's training rows. Everything committed survives a crash: running the command again
continues where it stopped. It does not check that N modules can be lowered: the report says how
many were.
"""

from __future__ import annotations

import copy

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import msgspec

from kernelzero.config import Config, dump_config
from kernelzero.kit.codeblocks import answer
from kernelzero.schemas import Event, ModuleAccepted, SampleGenerated, api_set_key, make_event, uuid7

TEACHER = "teacher"
FILES = ("coder_train", "coder_heldout", "proposer_train", "proposer_heldout")


class DistillReport(msgspec.Struct, kw_only=True):
    modules: int  # proposed
    accepted: int
    lowered: int
    correct: int
    rows: dict[str, int]  # per file of FILES
    heldout_sets: list[str]
    declined: dict[str, int]  # why the teacher declined, by op
    verdicts: dict[str, int]  # of the lowered answers
    seconds: float


def add_arguments(parser) -> None:
    parser.add_argument("--modules", type=int, required=True, metavar="N", help="modules the synthesizer proposes")
    parser.add_argument("--out", required=True, metavar="DIR", help="the run directory (an existing one is resumed)")
    parser.add_argument("--heldout-share", type=float, default=0.2, metavar="F",
                        help="share of API sets held out of both roles' training rows (default 0.2)")


class TeacherStage:
    """modules.accepted -> samples.generated: the lowering's answer (source None, with the reason, when declined)."""

    name = TEACHER
    topics = ("modules.accepted",)

    def __init__(self, target: str = "triton") -> None:
        self.target = target

    async def handle(self, event: Event) -> Sequence[Event]:
        import anyio

        from kernelzero.producers.teacher import NotLowerable, lower

        module: ModuleAccepted = event.payload
        try:
            source, reason = await anyio.to_thread.run_sync(lower, module.source), ""
        except NotLowerable as exc:
            source, reason = None, f"declined:{exc.op}"
        payload = SampleGenerated(sample_id=uuid7(), module_id=module.module_id, backend=self.target, source=source,
                                  problem_source=module.source, reason=reason, apis=module.apis, level=module.level)
        return [make_event(payload, correlation_id=module.module_id, producer=TEACHER, causation_id=event.event_id,
                           policy_version=0)]


class KeepDuplicates:
    """The validator's deduplicator interface, remembering nothing: a module's shapes are training data too.

    The validator's fingerprint ignores constants, so modules of one structure at other sizes
    count as duplicates for the Proposer's novelty; the Coder learns from them how sizes reach
    its host code, so distillation keeps them.
    """

    def duplicate_of(self, module_id: str, verdict) -> None:
        return None

    def add(self, module_id: str, fingerprint: str) -> None:
        pass


class Counted:
    """A stage whose handled records advance a progress bar."""

    def __init__(self, stage: Any, progress: Any, task: Any) -> None:
        self.stage, self.progress, self.task = stage, progress, task
        self.name, self.topics = stage.name, stage.topics

    async def handle(self, event: Event) -> Sequence[Event]:
        out = await self.stage.handle(event)
        self.progress.advance(self.task)
        return out


def held_out(api_sets: Sequence[str], share: float, seed: int) -> set[str]:
    """A fixed share of the distinct API sets (at least one when share > 0 and there are two), chosen by hash."""
    ranked = sorted(set(api_sets), key=lambda s: hashlib.sha256(f"{seed}:{s}".encode()).hexdigest())
    count = round(share * len(ranked))
    if share > 0 and len(ranked) > 1:
        count = max(1, min(count, len(ranked) - 1))
    return set(ranked[:count])


async def _run_stages(config: Config, log: Any, n: int, progress: Any) -> None:
    from kernelzero.consumers.validator import ValidatorStage, validator_sandbox
    from kernelzero.gpu_workers.pool import EvaluatorPool
    from kernelzero.gpu_workers.service import EvaluatorStage
    from kernelzero.producers.proposer import Proposer
    from kernelzero.stage import publish, run_stage

    async def counted(topic: str) -> int:
        return sum((await log.end_offsets(topic)).values())

    async def run(label: str, topic: str, stage: Any, workers: int = 1) -> None:
        done = sum((await log.committed(stage.name, topic)).values())
        task = progress.add_task(label, total=await counted(topic), completed=done)
        await run_stage(log, Counted(stage, progress, task), idle_exit_s=1.0, max_records=workers, concurrency=workers)

    proposed = await counted("modules.proposed")
    if proposed < n:
        proposer = Proposer(config.proposer, already_proposed=proposed)
        await publish(log, await proposer.propose(n - proposed), producer_name="distill")
    sandbox = validator_sandbox(config.evaluator, config.validator.device)  # contained as [evaluator] says
    try:
        await run("validating modules", "modules.proposed", ValidatorStage(config.validator, KeepDuplicates(), sandbox))
    finally:
        sandbox.close()
    await run("lowering with the teacher", "modules.accepted", TeacherStage(config.coder.target))
    async with EvaluatorPool(config.evaluator) as pool:
        await run("evaluating answers", "samples.generated", EvaluatorStage(pool), pool.workers)


def _rows(con: Any, config: Config, heldout_sets: set[str]) -> dict[str, list[dict]]:
    from kernelzero.analytics.replay import replay_query
    from kernelzero.analytics.views import view_parameters
    from kernelzero.producers.proposer import build_prompt

    query = replay_query("sft")
    params = {k: v for k, v in (view_parameters(config.analytics) | {"prompt_style": config.coder.prompt}).items()
              if f"${k}" in query}
    cursor = con.execute(query, params)
    names = [d[0] for d in cursor.description]
    coder = [dict(zip(names, row)) for row in cursor.fetchall()]
    modules = con.execute("SELECT module_id, source, apis FROM modules WHERE status = 'accepted' ORDER BY module_id").fetchall()
    proposer = [{"module_id": m, "apis": apis, "reference": source, "completion": answer(source),
                 "prompt": build_prompt(apis, config.proposer.scale, config.proposer.prompt)}
                for m, source, apis in modules]
    out: dict[str, list[dict]] = {name: [] for name in FILES}
    for role, rows in (("coder", coder), ("proposer", proposer)):
        for row in rows:
            split = "heldout" if api_set_key(row["apis"]) in heldout_sets else "train"
            out[f"{role}_{split}"].append({k: v for k, v in row.items() if k in ROW_FIELDS})
    return out


ROW_FIELDS = ("module_id", "sample_id", "apis", "prompt", "completion", "reference", "speedup")


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    os.replace(partial, path)


def _counts(con: Any, sql: str) -> dict[str, int]:
    return {str(key): count for key, count in con.execute(sql).fetchall()}


def distill(config: Config, out: Path, n: int, heldout_share: float) -> DistillReport:
    """Run (or resume) the distillation in `out` and write the four JSON-lines sets; returns the report."""
    import anyio
    from rich.progress import Progress

    from kernelzero.analytics.projection import Projection
    from kernelzero.analytics.sync import sync_projection
    from kernelzero.analytics.views import install_views
    from kernelzero.log import open_log

    started = time.monotonic()

    async def stages() -> None:
        log = await open_log(config.log.url)
        try:
            with Progress(transient=False) as progress:
                await _run_stages(config, log, n, progress)
            with Projection(config.analytics.db) as projection:
                await sync_projection(log, projection)
        finally:
            await log.close()

    anyio.run(stages)
    with Projection(config.analytics.db) as projection:
        con = projection.con
        install_views(con, config.analytics)
        api_sets = [api_set_key(apis) for (apis,) in con.execute(
            "SELECT apis FROM modules WHERE status = 'accepted'").fetchall()]
        heldout = held_out(api_sets, heldout_share, config.proposer.seed)
        rows = _rows(con, config, heldout)
        for name, content in rows.items():
            _write_jsonl(out / f"{name}.jsonl", content)
        report = DistillReport(
            modules=con.execute("SELECT count(*) FROM modules").fetchone()[0], accepted=len(api_sets),
            lowered=con.execute("SELECT count(*) FROM samples WHERE source IS NOT NULL").fetchone()[0],
            correct=con.execute("SELECT count(*) FROM evaluations WHERE verdict = 'correct'").fetchone()[0],
            rows={name: len(content) for name, content in rows.items()}, heldout_sets=sorted(heldout),
            declined=_counts(con, "SELECT reason, count(*) FROM samples WHERE source IS NULL GROUP BY ALL ORDER BY 2 DESC"),
            verdicts=_counts(con, "SELECT e.verdict || ' ' || e.reason, count(*) FROM evaluations e JOIN samples s "
                                  "USING (sample_id) WHERE s.source IS NOT NULL GROUP BY ALL ORDER BY 2 DESC"),
            seconds=round(time.monotonic() - started, 1),
        )
    (out / "distill.json").write_text(msgspec.json.format(msgspec.json.encode(report)).decode())
    return report


def distill_config(config: Config, out: Path) -> Config:
    """A copy of the user's configuration pointed at the run directory, proposing with the synthesizer (the
    caller's keeps its log and Proposer: the demo runs its loop with it after distilling)."""
    config = copy.deepcopy(config)
    config.log.url = f"embedded:{out / 'log.sqlite'}"
    config.analytics.db = str(out / "analytics.duckdb")
    config.proposer.backend = "synth"
    return config


def main(args, config: Config) -> int:
    if args.modules < 1 or not 0.0 <= args.heldout_share < 1.0:
        print("kernelzero distill: --modules must be >= 1 and --heldout-share in [0, 1)", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = distill_config(config, out)
    (out / "kernelzero.toml").write_text(dump_config(config))
    report = distill(config, out, args.modules, args.heldout_share)
    print(f"distill: {report.modules} modules, {report.accepted} accepted, {report.lowered} lowered, "
          f"{report.correct} correct; rows {report.rows}; held-out API sets: {len(report.heldout_sets)}; "
          f"{report.seconds:.0f} s; report in {out / 'distill.json'}")
    return 0
