"""Benchmark helper: distilled rows judged again by the contained evaluator (result cache bypassed), one JSON line each
with the verdict and the evidence that explains it; to look into an audit's disagreements on the machine that had them.

GPU (results in docs/BENCHMARKS.md, The loop on one GPU):
    python3 bench/judge_rows.py --rows DISTILL/coder_train.jsonl --ids 9ccd9fac14f5c8c5,46f79a235aa13503
    python3 bench/judge_rows.py --problem tests/evaluator/problems/tanh_leaky_rows.py \\
        --candidate tests/evaluator/candidates_cuda/triton_launch_bound_rows.py --repeat 6
It changes no verdict and asserts none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

EVIDENCE = ("physical_floor_ms", "detail", "trial", "phase", "off_stream_ms")


def pairs_of(args) -> list[tuple[str, str, str]]:
    """(name, problem, candidate): the chosen rows, then the problem and candidate files, each module a new one."""
    from kernelzero.kit.codeblocks import last_python_block

    pairs = []
    wanted = set(filter(None, args.ids.split(",")))
    for path in args.rows:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if not wanted or row["module_id"] in wanted:
                pairs.append((row["module_id"], row["reference"], last_python_block(row["completion"], "ModelNew")))
    if args.problem and args.candidate:
        problem, candidate = Path(args.problem).read_text(), Path(args.candidate).read_text()
        pairs += [(f"{Path(args.candidate).stem}#{i}", f"{problem}\n# {i}\n", candidate) for i in range(args.repeat)]
    return pairs


async def judge(pairs: list[tuple[str, str, str]], device: str) -> None:
    from kernelzero.config import load_config
    from kernelzero.gpu_workers import EvaluatorPool

    async with EvaluatorPool(load_config(None).evaluator, device=device, use_cache=False) as pool:
        async def one(name: str, problem: str, candidate: str) -> None:
            result = await pool.evaluate(problem, candidate)
            print(json.dumps({"name": name, "verdict": result.verdict, "reason": result.reason,
                              "runtime_ms": result.runtime_ms, "speedup": result.speedup,
                              **{k: result.evidence[k] for k in EVIDENCE if k in result.evidence}}), flush=True)

        await asyncio.gather(*(one(*pair) for pair in pairs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", default=[], help="distilled Coder sets (JSON lines)")
    parser.add_argument("--ids", default="", help="module ids to judge, comma-separated (default: every row)")
    parser.add_argument("--problem", help="a problem file, judged with --candidate")
    parser.add_argument("--candidate", help="a candidate file")
    parser.add_argument("--repeat", type=int, default=1, help="the candidate's evaluations, each as a new module")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: [evaluator] device)")
    args = parser.parse_args()
    pairs = pairs_of(args)
    if not pairs:
        parser.error("nothing to judge: give --rows (and --ids), or --problem with --candidate")
    asyncio.run(judge(pairs, args.device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
