"""`kernelzero bench kernelbench`: one KernelBench level scored as KernelBench publishes it (pass@k, fast_p over eager and torch.compile).

Each problem file of `ROOT/KernelBench/levelN` (or `ROOT/levelN`) becomes a `modules.accepted`
event. Without `--candidates` the real Coder samples G kernels for each; with `--candidates
RUN_DIR` the kernels are generations made elsewhere, in KernelBench's layout
(`level_{L}_problem_{P}_sample_{S}_kernel.py`, as its scripts/generate_samples.py writes them),
published as `samples.generated`. Either way the real evaluator judges every sample as a
`kernelzero serve` stage on the run's own event log (so `kernelzero sql --db OUT` sees them
afterwards), with the torch.compile'd reference timed too, and the summary is computed from the
projected evaluations (analytics/kernelbench_metrics.py). Problems the evaluator finds unusable
(`problem_error`) are excluded with the reason, not counted against pass@k; samples it failed on
itself (`evaluator_error`) are dropped from their problem. With `--candidates` only problems that
have candidates are scored (the rest are listed as missing; KernelBench's own analysis would count
them as failures). KernelBench is read from `--root`, never copied into the run. It does NOT check
that the problems are KernelBench's own, and its speedups are claims about the GPU it ran on only
(none on a CPU).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kernelzero.app.serve import serve_until_idle
from kernelzero.config import Config, dump_config

CANDIDATE_NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
BENCH_TIMEOUT_S = 300.0  # at least this per sample: compiling the reference (torch.compile) counts against it
RESULTS_SQL = """
SELECT module_id, verdict, reason, speedup, speedup_compile
FROM evaluations WHERE first_evaluation ORDER BY module_id, sample_id
"""


class BenchError(Exception):
    """Bad input the user can fix; the message says what."""


@dataclass(frozen=True)
class BenchProblem:
    number: int
    path: Path
    module_id: str


@dataclass(frozen=True)
class Result:
    verdict: str
    reason: str
    speedup: float | None
    speedup_compile: float | None


def add_arguments(parser) -> None:
    parser.add_argument("suite", choices=["kernelbench"], help="the benchmark suite")
    parser.add_argument("--root", required=True, metavar="DIR",
                        help="a KernelBench checkout (holding KernelBench/levelN) or a folder holding levelN")
    parser.add_argument("--level", required=True, type=int, metavar="N", help="the level to run (1, 2, 3, ...)")
    parser.add_argument("--candidates", default=None, metavar="RUN_DIR",
                        help="score generations made elsewhere: level_{L}_problem_{P}_sample_{S}_kernel.py files")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default=None,
                        help="where the evaluator runs (default: [evaluator] device)")
    parser.add_argument("--k", default="1,10", metavar="K,K", help="pass@k for these k (default 1,10)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object, last on stdout")
    parser.add_argument("--backend", choices=("cuda", "triton"), default=None,
                        help="the language the Coder writes (default: [coder] target)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N problems (by number)")
    parser.add_argument("--group-size", type=int, default=None, metavar="G",
                        help="samples per problem (default: [coder] group_size)")
    parser.add_argument("--out", default=None, metavar="DIR", help="run directory (default: runs/kernelbench-lN-TIMESTAMP)")


def problem_files(root: Path, level: int, limit: int | None) -> list[Path]:
    """The level's problem files, sorted by name; BenchError when the folder is missing or empty."""
    for folder in (root / "KernelBench" / f"level{level}", root / f"level{level}"):
        if folder.is_dir():
            files = sorted(folder.glob("*.py"), key=_problem_order)
            if not files:
                raise BenchError(f"{folder} holds no problem files (*.py)")
            return files[:limit] if limit else files
    raise BenchError(f"no level{level} folder under {root} (looked for KernelBench/level{level} and level{level})")


def _problem_order(path: Path) -> tuple[int, str]:
    """KernelBench names start with the problem number: 2_... before 10_..."""
    number = path.stem.split("_", 1)[0]
    return (int(number) if number.isdigit() else 1 << 30, path.stem)


def bench_problems(files: list[Path], level: int) -> list[BenchProblem]:
    """Problems numbered by their file name's prefix (KernelBench's problem id); unnumbered files are skipped."""
    return [BenchProblem(int(p.stem.split("_", 1)[0]), p, f"kernelbench-l{level}-{p.stem}")
            for p in files if p.stem.split("_", 1)[0].isdigit()]


def candidate_files(run_dir: Path, level: int) -> dict[int, dict[int, Path]]:
    """{problem: {sample: file}} for the level's KernelBench-layout files in `run_dir`; BenchError when it has none."""
    if not run_dir.is_dir():
        raise BenchError(f"--candidates {run_dir} is not a directory")
    found: dict[int, dict[int, Path]] = {}
    for path in run_dir.iterdir():
        match = CANDIDATE_NAME.match(path.name)
        if match and int(match.group(1)) == level:
            found.setdefault(int(match.group(2)), {})[int(match.group(3))] = path
    if not found:
        raise BenchError(f"{run_dir} holds no level_{level}_problem_P_sample_S_kernel.py files")
    return found


def parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise BenchError(f"--k takes positive integers separated by commas, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise BenchError(f"--k takes positive integers separated by commas, got {text!r}")
    return ks


def module_events(problems: list[BenchProblem], level: int) -> list:
    from kernelzero.schemas import ModuleAccepted, make_event

    events = []
    for problem in problems:
        source = problem.path.read_text()
        payload = ModuleAccepted(module_id=problem.module_id, source=source, apis=[], level=level,
                                 fingerprint=hashlib.sha256(source.encode()).hexdigest())
        events.append(make_event(payload, correlation_id=problem.module_id, producer="bench"))
    return events


def sample_events(problems: list[BenchProblem], candidates: dict[int, dict[int, Path]], level: int) -> list:
    """One samples.generated per candidate file, grouped by problem, its sample number as the group index."""
    from kernelzero.schemas import SampleGenerated, make_event

    events = []
    for problem in problems:
        samples = candidates.get(problem.number, {})
        reference = problem.path.read_text()
        for index, path in sorted(samples.items()):
            source = path.read_text()
            payload = SampleGenerated(sample_id=f"{problem.module_id}-s{index}", module_id=problem.module_id,
                                      backend="cuda" if "load_inline" in source or "cpp_extension" in source
                                      else "triton", source=source,
                                      problem_source=reference, group_size=len(samples), group_index=index,
                                      level=level)
            events.append(make_event(payload, correlation_id=problem.module_id, producer="bench"))
    return events


def bench_config(config: Config, out: Path, args) -> Config:
    if not args.broker:
        config.log.url = f"embedded:{out / 'log.sqlite'}"
    config.analytics.db = str(out / "analytics.duckdb")
    config.coder.target = args.backend or config.coder.target
    config.coder.group_size = args.group_size or config.coder.group_size
    config.evaluator.device = args.device or config.evaluator.device
    config.evaluator.time_compiled_reference = True
    config.evaluator.timeout_s = max(config.evaluator.timeout_s, BENCH_TIMEOUT_S)
    return config


def read_results(db_path: Path) -> dict[str, list[Result]]:
    """Every sample's first evaluation, by module."""
    import duckdb

    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute(RESULTS_SQL).fetchall()
    results: dict[str, list[Result]] = {}
    for module_id, *fields in rows:
        results.setdefault(module_id, []).append(Result(*fields))
    return results


def summarize(results: dict[str, list[Result]], problems: list[BenchProblem], level: int, ks: list[int]) -> dict:
    """KernelBench's metrics over the problems, unusable ones excluded; one row per problem."""
    from kernelzero.analytics.kernelbench_metrics import SampleScore, fast_p_table, mean_pass_at_k, pass_at_k
    from kernelzero.schemas import UNCHARGED_VERDICTS

    per_problem, excluded, eager, compiled = [], [], [], []
    compile_missing = []
    for problem in problems:
        got = results.get(problem.module_id, [])
        charged = [r for r in got if r.verdict not in UNCHARGED_VERDICTS]
        reason = _exclusion(got, charged)
        correct = sum(r.verdict == "correct" for r in charged)
        row = {"problem": problem.number, "name": problem.path.stem, "samples": len(charged), "correct": correct,
               "verdicts": dict(Counter(f"{r.verdict} {r.reason}" for r in got)), "excluded": reason,
               "pass_at": {str(k): None if reason else pass_at_k(len(charged), correct, k) for k in ks},
               "best_speedup": _best(r.speedup for r in charged if r.verdict == "correct"),
               "best_speedup_compile": _best(r.speedup_compile for r in charged if r.verdict == "correct")}
        per_problem.append(row)
        if reason:
            excluded.append({"problem": problem.number, "name": problem.path.stem, "reason": reason})
            continue
        eager.append([SampleScore(r.verdict == "correct", r.speedup) for r in charged])
        scores = [SampleScore(r.verdict == "correct", r.speedup_compile) for r in charged]
        # KernelBench leaves a problem without a torch.compile baseline out of that table (no entry to divide by)
        if any(s.correct and s.speedup is None for s in scores) and any(r.speedup is not None for r in charged):
            compile_missing.append(problem.number)
        else:
            compiled.append(scores)
    return {"level": level, "problems": len(eager), "samples": sum(len(p) for p in eager),
            "pass_at": {str(k): mean_pass_at_k(eager, k) for k in ks}, "fast_p": fast_p_table(eager),
            "fast_p_compile": fast_p_table(compiled), "compile_baseline_missing": compile_missing,
            "excluded": excluded, "per_problem": per_problem}


def _exclusion(got: list[Result], charged: list[Result]) -> str | None:
    """Why a problem is left out of the metrics: unusable (its problem_error reason), nothing scorable, or None."""
    unusable = [r.reason for r in got if r.verdict == "problem_error"]
    if unusable:
        return unusable[0]
    if not got:
        return "not_evaluated"
    return None if charged else "evaluator_error"


def _best(values) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def render_markdown(summary: dict) -> str:
    """The per-problem table, then pass@k and fast_p lines."""
    ks = list(summary["pass_at"])
    head = ["problem", "samples", "correct", *(f"pass@{k}" for k in ks), "best speedup (eager)",
            "best speedup (compile)", "verdicts"]
    lines = [f"## KernelBench level {summary['level']}", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for p in summary["per_problem"]:
        verdicts = f"excluded: {p['excluded']}" if p["excluded"] else \
            ", ".join(f"{v} x{n}" for v, n in sorted(p["verdicts"].items()))
        cells = [f"{p['problem']} {p['name']}", str(p["samples"]), str(p["correct"]),
                 *(_number(p["pass_at"][k]) for k in ks), _speedup(p["best_speedup"]),
                 _speedup(p["best_speedup_compile"]), verdicts]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"{summary['problems']} problems scored, {summary['samples']} samples, "
                  f"{len(summary['excluded'])} problems excluded",
              "pass@k: " + ", ".join(f"pass@{k} {_number(v)}" for k, v in summary["pass_at"].items())
              + " (a problem with fewer than k samples counts pass@n, as KernelBench does)",
              "fast_p over eager: " + _fast(summary["fast_p"]),
              "fast_p over torch.compile: " + _fast(summary["fast_p_compile"])]
    return "\n".join(lines) + "\n"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _speedup(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}x"


def _fast(table: dict[str, float | None]) -> str:
    if all(v is None for v in table.values()):
        return "n/a (no timing: CPU, or nothing timed)"
    return ", ".join(f"fast_{p} {_number(v)}" for p, v in table.items())


def _inputs(args, config: Config) -> tuple[list[BenchProblem], dict[int, dict[int, Path]] | None, list[int], Path]:
    """Problems, candidates (None: the Coder generates), the k list and the run directory; BenchError on bad input."""
    problems = bench_problems(problem_files(Path(args.root).expanduser(), args.level, args.limit), args.level)
    ks = parse_ks(args.k)
    candidates = None
    if args.candidates:
        candidates = candidate_files(Path(args.candidates).expanduser(), args.level)
        unknown = sorted(set(candidates) - {p.number for p in problems})
        if unknown:
            print(f"kernelzero bench: no level-{args.level} problem file for candidates of problems {unknown} "
                  f"under {args.root}: they are not scored", file=sys.stderr)
    elif not (config.coder.model or config.coder.backend == "openai"):
        raise BenchError("no Coder model: set [coder] model to a local Hugging Face directory "
                         "(or KERNELZERO_CODER_MODEL), or use backend openai; or score --candidates")
    out = Path(args.out or f"runs/kernelbench-l{args.level}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if (out / "log.sqlite").exists() or (out / "kernelbench.json").exists():
        raise BenchError(f"{out} already holds a run; choose another --out")
    return problems, candidates, ks, out


def _progress(role: str, log_url: str):
    """The bar of the stage that takes long (the Coder's modules, the evaluator's samples); none for the projector."""
    from kernelzero.app.progress import following

    if role == "coder":
        from kernelzero.producers.coder import CoderStage
        return following(log_url, CoderStage.name, "modules.accepted", "coder: modules")
    if role == "evaluator":
        from kernelzero.gpu_workers.service import EvaluatorStage
        return following(log_url, EvaluatorStage.name, EvaluatorStage.topics[0], "evaluator: samples")
    return contextlib.nullcontext()


def main(args, config: Config) -> int:
    from kernelzero.stage import publish_to

    try:
        problems, candidates, ks, out = _inputs(args, config)
    except BenchError as exc:
        print(f"kernelzero bench: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    config = bench_config(config, out, args)
    (out / "kernelzero.toml").write_text(dump_config(config))
    missing = [] if candidates is None else [p.number for p in problems if p.number not in candidates]
    problems = [p for p in problems if p.number not in missing]
    events = module_events(problems, args.level)
    if candidates is not None:
        events += sample_events(problems, candidates, args.level)

    publish_to(config.log.url, events, producer_name="bench")
    stages = ("evaluator", "projector") if candidates is not None else ("coder", "evaluator", "projector")
    samples = len(events) - len(problems) if candidates is not None else len(problems) * config.coder.group_size
    print(f"kernelzero bench: {len(problems)} level-{args.level} problems, {samples} samples, "
          f"evaluated on {config.evaluator.device} in {out}", file=sys.stderr)
    for role in stages:
        with _progress(role, config.log.url):
            code = serve_until_idle(role, config, idle_s=5.0)
        if code != 0:
            print(f"kernelzero bench: the {role} stage exited with {code}", file=sys.stderr)
            return code
    summary = {**summarize(read_results(Path(config.analytics.db)), problems, args.level, ks), "missing": missing}
    markdown = render_markdown(summary)
    (out / "kernelbench.json").write_text(json.dumps({"root": str(Path(args.root).resolve()), **summary}, indent=1))
    (out / "kernelbench.md").write_text(markdown)
    print(markdown)
    if args.json:
        print(json.dumps(summary))
    return 0
