"""Benchmark: synthesizer acceptance rate over N random API sets and validation throughput (modules/s); numbers for this machine only.

CPU (results in docs/BENCHMARKS.md):
    .venv/bin/python bench/proposer_throughput.py --out /tmp/bench-proposer --n 1000 --workers 2
GPU (reference runtimes of GPU-sized modules, >= 0.1 ms wanted; < 4 minutes on one H200):
    python bench/proposer_throughput.py --out OUT --device cuda --scale 1 --n 80 --workers 4
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--n", type=int, default=1000, help="API sets")
    parser.add_argument("--set-size", type=int, default=3)
    parser.add_argument("--scale", type=float, default=2.0 ** -13)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--workers", type=int, default=1, help="validation sandboxes run in parallel")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from kernelzero.config import EvaluatorConfig, ValidatorConfig
    from kernelzero.consumers.validator import validate, validator_sandbox
    from kernelzero.kit import api_catalog
    from kernelzero.producers.synthesizer import SynthesisError, synthesize

    rng = random.Random(args.seed)
    api_sets = [rng.sample(api_catalog.names(), args.set_size) for _ in range(args.n)]
    start = time.perf_counter()
    modules, synth_failures = [], []
    for i, apis in enumerate(api_sets):
        try:
            modules.append(synthesize(apis, seed=i, scale=args.scale))
        except SynthesisError as exc:
            synth_failures.append(str(exc))
    synth_s = time.perf_counter() - start

    config = ValidatorConfig(device=args.device, cpu_threads=1)
    sandboxes = [validator_sandbox(EvaluatorConfig(), config.device) for _ in range(args.workers)]
    for box in sandboxes:  # start the zygotes before timing
        validate(modules[0].source, modules[0].apis, config, sandbox=box)
    free = list(sandboxes)

    def check(module):
        box = free.pop()
        try:
            return validate(module.source, module.apis, config, sandbox=box)
        finally:
            free.append(box)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        verdicts = list(pool.map(check, modules))
    validate_s = time.perf_counter() - start
    for box in sandboxes:
        box.close()

    reasons = collections.Counter(v.reason or "accepted" for v in verdicts)
    runtimes = sorted(v.runtime_ms for v in verdicts if v.ok)
    accepted = reasons["accepted"]
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs",
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "api_sets": args.n, "set_size": args.set_size, "scale": args.scale, "device": args.device,
        "workers": args.workers,
        "synthesized": len(modules), "synth_failures": len(synth_failures),
        "synth_ms_per_module": 1000 * synth_s / max(1, args.n),
        "accepted": accepted, "acceptance_rate": accepted / args.n,
        "validation_modules_per_s": len(modules) / validate_s,
        "reasons": dict(reasons),
        "ref_runtime_ms_median": statistics.median(runtimes) if runtimes else None,
        "ref_runtime_ms_p10": runtimes[len(runtimes) // 10] if runtimes else None,
        "share_at_least_0_1_ms": sum(r >= 0.1 for r in runtimes) / max(1, len(runtimes)),
        "examples_rejected": [(m.apis, v.reason, v.detail[:200]) for m, v in zip(modules, verdicts) if not v.ok][:10],
        "synth_failure_examples": synth_failures[:5],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "proposer.json").write_text(json.dumps(result, indent=2))
    table = [
        "| metric | value |", "|---|---|",
        f"| API sets (size {args.set_size}, scale {args.scale:g}, {args.device}) | {args.n} |",
        f"| synthesized | {len(modules)} ({len(synth_failures)} sets with no valid composition) |",
        f"| synthesis time | {result['synth_ms_per_module']:.1f} ms per set (probe included) |",
        f"| accepted by the validator | {accepted} ({100 * result['acceptance_rate']:.1f}% of API sets) |",
        f"| validation throughput ({args.workers} sandbox{'es' if args.workers > 1 else ''}) | "
        f"{result['validation_modules_per_s']:.1f} modules/s |",
        f"| reference forward, median / p10 | {result['ref_runtime_ms_median']:.3f} / {result['ref_runtime_ms_p10']:.3f} ms |",
        f"| share of accepted with forward >= 0.1 ms | {100 * result['share_at_least_0_1_ms']:.0f}% |",
        f"| verdicts | {', '.join(f'{k}: {v}' for k, v in reasons.most_common())} |",
    ]
    (args.out / "proposer.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
