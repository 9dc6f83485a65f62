"""Benchmark: does a held-out row sampled with its seed come out the same alone and batched beside other rows, on this device and dtype (the common random numbers of kernelzero/kit/heldout_protocol.py)? Counts identical samples; it does not judge them.

Batching changes the padding and so the arithmetic of the logits; where two tokens' noisy scores are
closer than that difference, a sample takes another token and parts from its twin. This counts, per
dtype, the samples that stay identical and how far the others run together, and times both calls.

    python bench/common_draws.py --model DIR/coder --rows DISTILL/coder_heldout.jsonl --out OUT \
        [--device cuda --dtypes bfloat16,float32 --limit 32 --group 8]

Writes OUT/common_draws.json and prints one line per dtype.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from kernelzero.bootstrap.heldout_judge import read_heldout
from kernelzero.kit.coder_prompts import render_coder_prompt
from kernelzero.kit.heldout_protocol import sampling_seed
from kernelzero.producers.backend_transformers import TransformersGenerator


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def timed(call):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def measure(args: argparse.Namespace, dtype: str) -> dict:
    rows = read_heldout(args.rows, args.limit)
    prompts = [render_coder_prompt(row.reference, "triton", style="full") for row in rows]
    seeds = [sampling_seed(row.reference) for row in rows]
    generator = TransformersGenerator(str(args.model), device=args.device, dtype=dtype)
    options = dict(temperature=1.0, top_p=1.0, max_tokens=args.max_tokens)
    batched, batched_s = timed(lambda: generator.generate_sync(prompts, args.group, seeds=seeds, **options))
    alone_s, same, shares = 0.0, 0, []
    for prompt, seed, group in zip(prompts, seeds, batched):
        [single], seconds = timed(lambda: generator.generate_sync([prompt], args.group, seeds=[seed], **options))
        alone_s += seconds
        for a, b in zip(single, group):
            same += a.token_ids == b.token_ids
            shares.append(common_prefix(a.token_ids, b.token_ids) / max(len(a.token_ids), len(b.token_ids), 1))
    samples = len(prompts) * args.group
    return {"dtype": dtype, "samples": samples, "identical": same, "mean_shared_prefix": sum(shares) / samples,
            "batched_s": round(batched_s, 2), "alone_s": round(alone_s, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path, help="a Coder model directory (e.g. a bootstrap's coder)")
    parser.add_argument("--rows", required=True, type=Path, help="held-out rows (a distillation's coder_heldout.jsonl)")
    parser.add_argument("--out", required=True, type=Path, help="directory for common_draws.json")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtypes", default="float32", help="comma-separated model dtypes to compare")
    parser.add_argument("--limit", type=int, default=32, help="held-out rows (default 32)")
    parser.add_argument("--group", type=int, default=8, help="samples a row (default 8)")
    parser.add_argument("--max-tokens", type=int, default=528, help="tokens a sample at most (default 528)")
    args = parser.parse_args(argv)
    results = [measure(args, dtype) for dtype in args.dtypes.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    machine = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    (args.out / "common_draws.json").write_text(json.dumps({"machine": machine, "torch": torch.__version__,
                                                            "results": results}, indent=2))
    for r in results:
        print(f"{machine} {r['dtype']}: {r['identical']}/{r['samples']} samples identical alone and batched, "
              f"shared prefix {r['mean_shared_prefix']:.3f} on average; batched {r['batched_s']} s, "
              f"one row at a time {r['alone_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
