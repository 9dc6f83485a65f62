"""Benchmark: the Coder teacher's coverage of synthesized modules: share lowered, share the real evaluator marks correct, decline reasons per API family, seconds per evaluation; numbers for this machine only.

Modules are drawn as the synth Proposer draws them (ApiSampler without a frontier, set sizes 1 to
--max-set-size, synthesize at --scale, up to 8 redraws when the synthesizer finds no composition),
from the whole catalog, from --families, or (--lowerable-pool) from the APIs whose one-API module
the teacher lowers. Every lowered pair is evaluated by one EvaluatorPool (CPU: the Triton
interpreter), without its result cache. It also lists which catalog APIs lower alone (one module
per API, seed 0: api_support.json) and how many declined modules would lower with up to 4 kernels.

    .venv/bin/python bench/teacher_coverage.py --modules 150 --out /tmp/bench-teacher [--lowerable-pool]
GPU (compiled Triton, timed; speedups over eager torch): add --device cuda [--scale 1].
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

SYNTH_TRIES = 8  # as producers/proposer.py redraws


def draw_modules(n: int, apis: list[str], max_size: int, scale: float, seed: int) -> list:
    from kernelzero.config import ProposerConfig
    from kernelzero.producers.api_sampler import ApiSampler
    from kernelzero.producers.synthesizer import SynthesisError, synthesize

    sampler = ApiSampler(apis, explore=ProposerConfig().explore, seed=seed)
    rng, modules, count = random.Random(seed), [], 0
    while len(modules) < n:
        for _ in range(SYNTH_TRIES):
            count += 1
            api_set = sampler.sample(rng.randint(1, max_size))
            try:
                modules.append(synthesize(api_set, seed=seed * 1_000_003 + count, scale=scale))
                break
            except SynthesisError:
                continue
    return modules


def lower_all(modules: list, max_kernels: int) -> list[dict]:
    from kernelzero.bootstrap.teacher import NotLowerable, lower

    rows = []
    for module in modules:
        row = {"apis": module.apis, "source": module.source}
        start = time.perf_counter()
        try:
            row["candidate"] = lower(module.source, max_kernels)
        except NotLowerable as exc:
            row["declined"] = str(exc)
            row["lowers_with_4_kernels"] = _lowers(module.source, 4)
        row["lower_s"] = time.perf_counter() - start
        rows.append(row)
    return rows


def _lowers(source: str, max_kernels: int) -> bool:
    from kernelzero.bootstrap.teacher import NotLowerable, lower
    try:
        lower(source, max_kernels)
        return True
    except NotLowerable:
        return False


async def evaluate_all(rows: list[dict], cache_dir: str, device: str) -> None:
    from kernelzero.config import EvaluatorConfig
    from kernelzero.gpu_workers import EvaluatorPool, ProblemFailed

    config = EvaluatorConfig(device=device, cache_dir=cache_dir)
    async with EvaluatorPool(config, device=device, use_cache=False) as pool:
        for row in rows:
            if "candidate" not in row:
                continue
            start = time.perf_counter()
            try:
                result = await pool.evaluate(row["source"], row["candidate"])
                row["verdict"], row["reason"], row["speedup"] = result.verdict, result.reason, result.speedup
                row["evidence"] = {k: v for k, v in result.evidence.items() if k in ("error", "detail", "trial", "ops")}
            except ProblemFailed as exc:
                row["verdict"], row["reason"] = "problem_error", str(exc)
            row["eval_s"] = time.perf_counter() - start


def families_of(apis: list[str]) -> set[str]:
    from kernelzero.kit.api_catalog import get
    return {get(a).family for a in apis}


def summarize(rows: list[dict]) -> dict:
    lowered = [r for r in rows if "candidate" in r]
    correct = [r for r in lowered if r.get("verdict") == "correct"]
    per_family: dict = {}
    for family in sorted({f for r in rows for f in families_of(r["apis"])}):
        mine = [r for r in rows if family in families_of(r["apis"])]
        reasons = collections.Counter(r["declined"] for r in mine if "declined" in r)
        per_family[family] = {
            "modules": len(mine), "lowered": sum("candidate" in r for r in mine),
            "correct": sum(r.get("verdict") == "correct" for r in mine),
            "declines": dict(reasons.most_common(8)),
        }
    eval_s = [r["eval_s"] for r in lowered if "eval_s" in r]
    speedups = [r["speedup"] for r in correct if r.get("speedup")]
    return {
        "modules": len(rows), "lowered": len(lowered), "correct": len(correct),
        "share_lowered": round(len(lowered) / max(len(rows), 1), 3),
        "share_correct_of_lowered": round(len(correct) / max(len(lowered), 1), 3),
        "verdicts": dict(collections.Counter(f"{r['verdict']}:{r['reason']}" for r in lowered)),
        "speedup_median": round(statistics.median(speedups), 3) if speedups else None,
        "speedup_geomean": round(statistics.geometric_mean(speedups), 3) if speedups else None,
        "eval_s_mean": round(statistics.mean(eval_s), 2) if eval_s else None,
        "eval_s_median": round(statistics.median(eval_s), 2) if eval_s else None,
        "declined_but_lowered_with_4_kernels": sum(bool(r.get("lowers_with_4_kernels")) for r in rows),
        "lower_s_mean": round(statistics.mean(r["lower_s"] for r in rows), 4),
        "answer_chars_median": statistics.median(len(r["candidate"]) for r in lowered) if lowered else None,
        "per_family": per_family,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=150)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-set-size", type=int, default=3)
    parser.add_argument("--scale", type=float, default=2.0 ** -13)
    parser.add_argument("--families", default="", help="comma-separated catalog families to draw from (default: all)")
    parser.add_argument("--lowerable-pool", action="store_true", help="draw only APIs whose one-API module lowers")
    parser.add_argument("--max-kernels", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from kernelzero.kit import api_catalog
    from kernelzero.bootstrap.teacher import api_support

    families = [f for f in args.families.split(",") if f]
    started = time.perf_counter()
    support = api_support(args.scale)
    apis = [s.name for s in api_catalog.CATALOG if (not families or s.family in families)
            and (not args.lowerable_pool or not support[s.name])]
    rows = lower_all(draw_modules(args.modules, apis, args.max_set_size, args.scale, args.seed), args.max_kernels)
    with tempfile.TemporaryDirectory() as cache_dir:
        asyncio.run(evaluate_all(rows, cache_dir, args.device))
    summary = summarize(rows)
    summary.update({
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "families": families or "all", "lowerable_pool": args.lowerable_pool, "pool_apis": len(apis),
        "max_kernels": args.max_kernels, "device": args.device, "scale": args.scale,
        "wall_s": round(time.perf_counter() - started, 1),
        "apis_lowered_alone": sum(not why for why in support.values()), "apis": len(support),
    })
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (args.out / "api_support.json").write_text(json.dumps(support, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "per_family"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
