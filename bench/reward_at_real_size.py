"""The reward at real sizes on one GPU (issue 26): KernelBench's copy-candidate sweep, real-size ReLU kernels, the timed-call hacks, a pass as if the card had 40 GB; it does NOT compare speedups across runs.

Run from the repository root on the GPU machine, after `source bench/gpu_setup.sh` (carry `.whl`, `.kb`
holding KernelBench/level1 and level2, `.sandbox-tools`). Each phase is resumable: its evaluations go to
OUT/<phase>.jsonl as they finish and a later run skips what is there, so keep OUT where the warm machine
keeps it (runs/ is ignored by git) and copy it to $OUT at the end. Three device calls, each under 9 minutes
on one H100 with 16 CPU cores:

    python3 bench/reward_at_real_size.py --kb .kb --out runs/issue26 --phases sweep; cp -r runs/issue26 $OUT/
    python3 bench/reward_at_real_size.py --kb .kb --out runs/issue26 --phases sweep,relu,hacks --budget-s 120; cp -r runs/issue26 $OUT/
    python3 bench/reward_at_real_size.py --kb .kb --out runs/issue26 --phases cap40; cp -r runs/issue26 $OUT/

(the second call finishes the sweep where the first ran out of `--budget-s`, 420 s by default, starting
nothing after 120 s, then runs the ReLU kernels and the hacks; the third, the 40 GB pass, may be left out).
Phases:
- `sweep`: every level-1 and level-2 problem against its copy candidate (bench/kernelbench_sweep.py), 4
  workers sharing the GPU: every one must be rejected or its problem excluded (constant, non-deterministic);
  no `runtime_error out_of_memory`, no `evaluation_out_of_memory`. The table gives each problem's need.
- `relu`: KernelBench level 1 problem 19 (4096 x 393216 fp32) with a correct Triton ReLU
  (bench/kernelbench_candidates/level_1_problem_19_sample_0_kernel.py) and a correct CUDA one
  (tests/evaluator/candidates_cuda/cuda_correct.py): each alone with 1 worker, then all four at once with 4.
- `hacks`: the timed-call hacks (tests/evaluator/candidates*/timed_*.py and triton_timed_*.py, the GPU ones on
  4096 x 65536) and the honest ReLU beside them, 1 worker: each must get its `# expect:` verdict.
- `cap40`: `gpu_memory_cap_gb = 40` over the level-1 problems whose input and two outputs exceed 10 GB
  (CAP40_PROBLEMS, from KernelBench's shapes), copy candidates, 4 workers: each judged.
The summary of every phase run so far is printed last and written to OUT/summary.md. Exits 1 where a
verdict differs from what is expected.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "evaluator"
TRITON_RELU = ROOT / "bench" / "kernelbench_candidates" / "level_1_problem_19_sample_0_kernel.py"
CUDA_RELU = CORPUS / "candidates_cuda" / "cuda_correct.py"
# level 1 problems whose input plus two outputs exceed 10 GB (KernelBench 423217d): elementwise and softmaxes,
# norms, pooling, reductions over 8.6 GB inputs, convolutions with large outputs, cumulative sums, attention
CAP40_PROBLEMS = [5, *range(19, 40), 45, 46, 63, 76, 84, 87, *range(89, 94), 97]
PHASES = ("sweep", "relu", "hacks", "cap40")
DEVICE = "cuda"  # a test of this script's plumbing sets "cpu"
COPY_EXPECTED = {"rejected", "problem_error"}
MEMORY_FAILURES = {("runtime_error", "out_of_memory"), ("problem_error", "evaluation_out_of_memory"),
                   ("problem_error", "reference_out_of_memory")}


def _load_sweep():
    spec = importlib.util.spec_from_file_location("kernelbench_sweep", ROOT / "bench" / "kernelbench_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


SWEEP = _load_sweep()


class Journal:
    """One phase's rows, one JSON object a line, appended as they come; what is there already is not run again."""

    def __init__(self, out: Path, phase: str):
        self.path = out / f"{phase}.jsonl"
        self.rows = [json.loads(line) for line in self.path.read_text().splitlines()] if self.path.exists() else []

    def done(self, key: str) -> bool:
        return any(row["key"] == key for row in self.rows)

    def add(self, row: dict) -> None:
        self.rows.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")


def _result_row(key: str, result: Any, seconds: float, **fields: Any) -> dict:
    evidence = {k: result.evidence[k] for k in ("memory", "detail", "trial", "phase", "call", "error", "memory_shortfall")
                if k in result.evidence}
    return {"key": key, **fields, "verdict": result.verdict, "reason": result.reason, "speedup": result.speedup,
            "runtime_ms": result.runtime_ms, "ref_ms": result.ref_eager_ms, "seconds": round(seconds, 1),
            "need_gb": SWEEP.need_gb({"evidence": evidence}), "evidence": evidence}


def _config(cache_dir: Path, workers: int, **overrides: Any):
    from kernelzero.config import EvaluatorConfig
    return EvaluatorConfig(**{"cache_dir": str(cache_dir), "workers_per_gpu": workers, "timeout_s": 300.0,
                              **overrides})


async def copy_sweep(args, journal: Journal, levels: list[int], only: list[int] | None, **config: Any) -> None:
    """Copy candidates of the levels' problems (level 1 only `only`) not yet in the journal, 4 workers."""
    paths = [(level, p) for level in levels for p in SWEEP.problem_paths(args.kb, level)
             if (only is None or level != 1 or int(p.stem.split("_", 1)[0]) in only)
             and not journal.done(f"{level}:{p.stem}")]
    if not paths:
        return
    sweep_args = argparse.Namespace(device=DEVICE, workers_per_gpu=4, timeout_s=300.0, sandbox=args.sandbox,
                                    budget_s=args.budget_s, dry_run=False)

    def keep(row: dict) -> None:
        journal.add({"key": f"{row['level']}:{row['name']}", **row, "need_gb": SWEEP.need_gb(row)})

    await SWEEP.sweep(paths, sweep_args, str(args.out / "cache"), on_row=keep, **config)


async def relu_runs(args, journal: Journal) -> None:
    """Real-size ReLU: each kernel alone with 1 worker, then both twice at once with 4 workers sharing the GPU."""
    from kernelzero.gpu_workers import EvaluatorPool
    problem = next(p for p in SWEEP.problem_paths(args.kb, 1) if p.stem.startswith("19_")).read_text()
    kernels = {"triton": TRITON_RELU.read_text(), "cuda": CUDA_RELU.read_text()}
    for workers, runs in ((1, ["triton", "cuda"]), (4, ["triton", "cuda", "triton", "cuda"])):
        keys = [f"{workers}w:{name}:{i}" for i, name in enumerate(runs)]
        if all(journal.done(k) for k in keys):
            continue
        async with EvaluatorPool(_config(args.out / "cache", workers), device=DEVICE, use_cache=False) as pool:
            async def one(key: str, name: str) -> None:
                started = time.monotonic()
                result = await pool.evaluate(problem, kernels[name])
                journal.add(_result_row(key, result, time.monotonic() - started, workers=workers, kernel=name,
                                        expected="correct ok"))

            if workers == 1:
                for key, name in zip(keys, runs):
                    await one(key, name)
            else:
                await asyncio.gather(*(one(k, n) for k, n in zip(keys, runs)))


def hack_files() -> list[Path]:
    files = sorted((CORPUS / "candidates").glob("timed_*.py")) + sorted((CORPUS / "candidates_cuda").glob("triton_timed_*.py"))
    return files + [CORPUS / "candidates_cuda" / "triton_relu_wide.py"]


async def hack_runs(args, journal: Journal) -> None:
    """Every timed-call hack and the honest ReLU beside them, one at a time, against its `# expect:` verdict."""
    from kernelzero.gpu_workers import EvaluatorPool
    paths = [p for p in hack_files() if not journal.done(f"{p.parent.name}/{p.name}")]
    if not paths:
        return
    async with EvaluatorPool(_config(args.out / "cache", 1), device=DEVICE, use_cache=False) as pool:
        for path in paths:
            key = f"{path.parent.name}/{path.name}"
            fields = dict(re.findall(r"^# (expect|problem): (.+)$", path.read_text(), re.M))
            problem = (CORPUS / "problems" / f"{fields['problem']}.py").read_text()
            started = time.monotonic()
            result = await pool.evaluate(problem, path.read_text())
            journal.add(_result_row(key, result, time.monotonic() - started, problem=fields["problem"],
                                    expected=fields["expect"]))


def _ok(phase: str, row: dict) -> bool:
    got = f"{row['verdict']} {row['reason']}"
    if phase in ("sweep", "cap40"):
        return row["verdict"] in COPY_EXPECTED and (row["verdict"], row["reason"]) not in MEMORY_FAILURES
    return got == row["expected"]


def summary(out: Path) -> tuple[str, bool]:
    """Markdown for every phase with a journal; whether every verdict is as expected."""
    lines, ok = ["# The reward at real sizes (bench/reward_at_real_size.py)", ""], True
    for phase in PHASES:
        rows = Journal(out, phase).rows
        if not rows:
            continue
        wrong = [r for r in rows if not _ok(phase, r)]
        ok = ok and not wrong
        counts = Counter(f"{r['verdict']} {r['reason']}" for r in rows)
        lines += [f"## {phase}: {len(rows)} evaluations, {len(wrong)} not as expected", "",
                  ", ".join(f"{k}: {n}" for k, n in sorted(counts.items())), ""]
        if phase in ("sweep", "cap40"):
            lines += ["| problem | verdict | reason | need GB | seconds |", "|---|---|---|---:|---:|"]
            lines += [f"| {r['key']} | {r['verdict']} | {r['reason']} | {r['need_gb']} | {r['seconds']} |"
                      for r in sorted(rows, key=lambda r: (r["level"], r["problem"]))]
        else:
            lines += ["| run | expected | got | speedup | runtime ms | ref ms | need GB | seconds |",
                      "|---|---|---|---:|---:|---:|---:|---:|"]
            lines += [f"| {r['key']} | {r['expected']} | {r['verdict']} {r['reason']} | {_num(r['speedup'])} | "
                      f"{_num(r['runtime_ms'])} | {_num(r['ref_ms'])} | {r['need_gb']} | {r['seconds']} |" for r in rows]
        lines += [""] + [f"- NOT AS EXPECTED: {r['key']}: {r['verdict']} {r['reason']} {r['evidence']}" for r in wrong]
    return "\n".join(lines) + "\n", ok


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kb", required=True, type=Path, help="folder holding KernelBench/level1 and level2")
    parser.add_argument("--out", required=True, type=Path, help="the run's folder: phases resume from it")
    parser.add_argument("--phases", default="sweep", help=f"comma-separated, of {', '.join(PHASES)}")
    parser.add_argument("--budget-s", type=float, default=420.0, help="the sweeps start no problem after this")
    parser.add_argument("--sandbox", choices=("on", "off"), default="on")
    args = parser.parse_args(argv)
    phases = args.phases.split(",")
    if set(phases) - set(PHASES):
        parser.error(f"--phases takes {', '.join(PHASES)}")
    (args.out / "cache").mkdir(parents=True, exist_ok=True)
    for phase in phases:
        journal = Journal(args.out, phase)
        if phase == "sweep":
            asyncio.run(copy_sweep(args, journal, [1, 2], None))
        elif phase == "cap40":
            asyncio.run(copy_sweep(args, journal, [1], CAP40_PROBLEMS, gpu_memory_cap_gb=40.0))
        elif phase == "relu":
            asyncio.run(relu_runs(args, journal))
        else:
            asyncio.run(hack_runs(args, journal))
    text, ok = summary(args.out)
    (args.out / "summary.md").write_text(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
