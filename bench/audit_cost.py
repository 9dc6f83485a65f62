"""Benchmark: what one contained evaluation of a teacher answer costs the first time its problem is seen against the
same rows judged again (a shared per-problem cost would show as a gap); one worker, the result cache bypassed.

CPU (results in docs/BENCHMARKS.md, The Coder from zero):
    .venv/bin/python bench/audit_cost.py --rows ~/.cache/kernelzero/demo/distill-KEY/coder_train.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path


async def _seconds_each(pool, pairs: list[tuple[str, str]]) -> tuple[float, list[str]]:
    started = time.perf_counter()
    verdicts = [(await pool.evaluate(problem, answer)).verdict for problem, answer in pairs]
    return (time.perf_counter() - started) / len(pairs), verdicts


async def measure(rows: list[dict], n: int) -> dict:
    import msgspec

    from kernelzero.config import load_config
    from kernelzero.gpu_workers import EvaluatorPool
    from kernelzero.kit.codeblocks import last_python_block

    config = load_config(None)
    evaluator = msgspec.structs.replace(config.evaluator, device="cpu", trials=2, cpu_workers=1)  # the demo's trials
    pairs = [(row["reference"], last_python_block(row["completion"], "ModelNew")) for row in rows[:n + 1]]
    async with EvaluatorPool(evaluator, use_cache=False) as pool:
        await pool.evaluate(*pairs[0])  # the worker's start is not an evaluation's cost
        new, new_verdicts = await _seconds_each(pool, pairs[1:n + 1])
        same, same_verdicts = await _seconds_each(pool, pairs[1:n + 1])  # the same rows again: sizes alike
    return {"evaluations": n, "new_problem_s": round(new, 3), "same_problem_s": round(same, 3),
            "verdicts": sorted(set(new_verdicts + same_verdicts))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", required=True, type=Path, help="a distillation's coder_train.jsonl")
    parser.add_argument("--n", type=int, default=10, help="evaluations of each kind")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]
    print(json.dumps(asyncio.run(measure(rows, args.n))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
