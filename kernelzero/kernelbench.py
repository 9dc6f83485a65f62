"""`kernelzero bench kernelbench`: one KernelBench level through the Coder and the evaluator; reports solved and fast_p.

Each problem file of `ROOT/KernelBench/levelN` (or `ROOT/levelN`) becomes a `modules.accepted`
event; the real Coder samples G kernels for each and the real evaluator judges them, as
`kernelzero serve` stages on the run's own event log, so `kernelzero sql --db OUT` sees every
sample afterwards. KernelBench is read from `--root`, never copied into the run. It does NOT
check that the problems are KernelBench's own (any folder of problem files works), and its
speedups are claims about the GPU it ran on only (none on a CPU).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from kernelzero.config import Config, dump_config
from kernelzero.serve import serve_until_idle

STAGES = ("coder", "evaluator", "projector")
SUMMARY_SQL = """
SELECT module_id,
       count(*) AS samples,
       count(*) FILTER (WHERE verdict = 'correct') AS correct,
       max(speedup) FILTER (WHERE verdict = 'correct') AS best_speedup,
       arg_max(verdict || ' ' || coalesce(reason, ''), verdict = 'correct') AS best_verdict
FROM evaluations WHERE first_evaluation GROUP BY module_id ORDER BY module_id
"""


class BenchError(Exception):
    """Bad input the user can fix; the message says what."""


def add_arguments(parser) -> None:
    parser.add_argument("suite", choices=["kernelbench"], help="the benchmark suite")
    parser.add_argument("--root", required=True, metavar="DIR",
                        help="a KernelBench checkout (holding KernelBench/levelN) or a folder holding levelN")
    parser.add_argument("--level", required=True, type=int, metavar="N", help="the level to run (1, 2, 3, ...)")
    parser.add_argument("--backend", choices=("cuda", "triton"), default=None,
                        help="the language the Coder writes (default: [coder] target)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N problems (by number)")
    parser.add_argument("--group-size", type=int, default=None, metavar="G", help="samples per problem (default: [coder] group_size)")
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


def module_events(files: list[Path], level: int) -> list:
    from kernelzero.schemas import ModuleAccepted, make_event

    events = []
    for path in files:
        source = path.read_text()
        module_id = f"kernelbench-l{level}-{path.stem}"
        payload = ModuleAccepted(module_id=module_id, source=source, apis=[], level=level,
                                 fingerprint=hashlib.sha256(source.encode()).hexdigest())
        events.append(make_event(payload, correlation_id=module_id, producer="bench"))
    return events


def bench_config(config: Config, out: Path, args) -> Config:
    if not args.broker:
        config.log.url = f"embedded:{out / 'log.sqlite'}"
    config.analytics.db = str(out / "analytics.duckdb")
    config.coder.target = args.backend or config.coder.target
    config.coder.group_size = args.group_size or config.coder.group_size
    return config


def summarize(db_path: Path, module_ids: list[str]) -> dict:
    """Per problem: samples, correct, best speedup, best verdict; overall: solved and fast_1 shares."""
    import duckdb

    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = {r[0]: dict(zip(("samples", "correct", "best_speedup", "best_verdict"), r[1:]))
                for r in con.execute(SUMMARY_SQL).fetchall()}
    problems = {m: rows.get(m, {"samples": 0, "correct": 0, "best_speedup": None, "best_verdict": "not evaluated"})
                for m in module_ids}
    n = len(problems)
    solved = sum(p["correct"] > 0 for p in problems.values())
    timed = any(p["best_speedup"] is not None for p in problems.values())
    fast = sum((p["best_speedup"] or 0) > 1 for p in problems.values())
    return {"problems": n, "solved": solved, "solved_share": solved / n if n else 0.0,
            "fast_1_share": fast / n if n and timed else None,
            "samples": sum(p["samples"] for p in problems.values()),
            "correct_samples": sum(p["correct"] for p in problems.values()), "per_problem": problems}


def _print(summary: dict, level: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"KernelBench level {level}")
    for column in ("problem", "samples", "correct", "best speedup", "best verdict"):
        table.add_column(column)
    for name, p in summary["per_problem"].items():
        speed = "" if p["best_speedup"] is None else f"{p['best_speedup']:.3g}x"
        table.add_row(name, str(p["samples"]), str(p["correct"]), speed, p["best_verdict"])
    console = Console()
    console.print(table)
    fast = "n/a (no timing: CPU)" if summary["fast_1_share"] is None else f"{summary['fast_1_share']:.1%}"
    console.print(f"solved {summary['solved']} of {summary['problems']} ({summary['solved_share']:.1%}); "
                  f"fast_1 {fast}; correct samples {summary['correct_samples']} of {summary['samples']}")


def main(args, config: Config) -> int:
    import anyio

    from kernelzero.log import open_log
    from kernelzero.stage import publish

    try:
        files = problem_files(Path(args.root).expanduser(), args.level, args.limit)
        if not (config.coder.model or config.coder.backend == "openai"):
            raise BenchError("no Coder model: set [coder] model to a local Hugging Face directory "
                             "(or KERNELZERO_CODER_MODEL), or use backend openai")
        out = Path(args.out or f"runs/kernelbench-l{args.level}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
        if (out / "log.sqlite").exists() or (out / "kernelbench.json").exists():
            raise BenchError(f"{out} already holds a run; choose another --out")
    except BenchError as exc:
        print(f"kernelzero bench: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    config = bench_config(config, out, args)
    config_path = out / "kernelzero.toml"
    config_path.write_text(dump_config(config))
    events = module_events(files, args.level)

    async def publish_modules() -> None:
        log = await open_log(config.log.url)
        try:
            await publish(log, events, producer_name="bench")
        finally:
            await log.close()

    anyio.run(publish_modules)
    print(f"kernelzero bench: {len(files)} level-{args.level} problems x {config.coder.group_size} samples "
          f"({config.coder.target}) in {out}", file=sys.stderr)
    from rich.console import Console

    console = Console(stderr=True)
    for role in STAGES:
        with console.status(f"{role}: {len(files) * config.coder.group_size} samples"):
            code = serve_until_idle(role, config_path, idle_s=5.0)
        console.print(f"{role} done")
        if code != 0:
            print(f"kernelzero bench: the {role} stage exited with {code}", file=sys.stderr)
            return code
    summary = summarize(Path(config.analytics.db), [e.payload.module_id for e in events])
    (out / "kernelbench.json").write_text(json.dumps({"level": args.level, "root": str(Path(args.root).resolve()),
                                                       "target": config.coder.target, **summary}, indent=1))
    _print(summary, args.level)
    return 0
