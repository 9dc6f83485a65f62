"""Benchmark: Coder generation throughput of the transformers backend, one batched group of G versus G one by one; random weights, so speed only.

On an H200 (default): a random-weight model of Qwen2-0.5B's architecture (about 494 M
parameters, bfloat16), the real Coder prompt, G = 8 samples of 1,024 tokens each (stop tokens
ignored so every sample has the full length). `--tiny` runs a tiny model on the CPU as a smoke
test. The one-by-one run stops early when the time budget would be exceeded and reports the
rate of the samples it finished.

    python bench/generation_throughput.py --out DIR            # H200, < 4 minutes
    python bench/generation_throughput.py --out DIR --tiny     # any CPU, seconds

Writes DIR/generation_throughput.json and .md and prints the table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from kernelzero.kit.coder_prompts import render_coder_prompt
from kernelzero.kit.models import QWEN2_0_5B, TINY_QWEN2, build_random_model
from kernelzero.producers.backend_transformers import TransformersGenerator

REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=self.dim) * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(256, 4096)]


def get_init_inputs():
    return [-1]
"""


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_generation(generator: TransformersGenerator, prompt: str, n: int, tokens: int) -> tuple[float, int]:
    """(seconds, generated tokens) of one call producing n samples of `tokens` tokens."""
    synchronize()
    start = time.perf_counter()
    [group] = generator.generate_sync([prompt], n, temperature=1.0, top_p=1.0, max_tokens=tokens)
    synchronize()
    return time.perf_counter() - start, sum(len(c.token_ids) for c in group)


def run(args: argparse.Namespace) -> dict:
    config = TINY_QWEN2 if args.tiny else QWEN2_0_5B
    device = "cpu" if args.tiny else "cuda"
    dtype = "float32" if args.tiny else "bfloat16"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = build_random_model(Path(scratch) / "model", config, seed=0, dtype=dtype)
        generator = TransformersGenerator(str(model_dir), device=device, dtype=dtype, ignore_eos=True)
    parameters = sum(p.numel() for p in generator.model.parameters())
    prompt = render_coder_prompt(REFERENCE, "triton", style="full")
    prompt_tokens = len(generator.tokenizer(prompt)["input_ids"])
    timed_generation(generator, prompt, args.group, 8)  # warm-up: kernels, allocator, caches
    setup_s = time.perf_counter() - started

    batched_s, batched_tokens = timed_generation(generator, prompt, args.group, args.tokens)
    single_s, single_tokens, singles = 0.0, 0, 0
    deadline = started + args.budget_s
    while singles < args.group:
        seconds, tokens = timed_generation(generator, prompt, 1, args.tokens)
        single_s, single_tokens, singles = single_s + seconds, single_tokens + tokens, singles + 1
        if time.perf_counter() + seconds > deadline:
            break
    return {
        "date": datetime.date.today().isoformat(),
        "machine": torch.cuda.get_device_name() if device == "cuda" else f"{platform.processor() or 'cpu'} CPU",
        "torch": torch.__version__,
        "model": f"{config['model_type']} random weights, {parameters / 1e6:.1f} M parameters, {dtype}",
        "prompt_tokens": prompt_tokens,
        "group_size": args.group,
        "max_tokens": args.tokens,
        "setup_s": round(setup_s, 2),
        "batched": {"samples": args.group, "seconds": round(batched_s, 3), "tokens": batched_tokens,
                    "tokens_per_s": round(batched_tokens / batched_s, 1)},
        "one_by_one": {"samples": singles, "seconds": round(single_s, 3), "tokens": single_tokens,
                       "tokens_per_s": round(single_tokens / single_s, 1)},
        "speedup": round((batched_tokens / batched_s) / (single_tokens / single_s), 2),
    }


def table(result: dict) -> str:
    rows = [
        f"Generation throughput, transformers backend — {result['machine']}, {result['model']}, "
        f"prompt {result['prompt_tokens']} tokens, G = {result['group_size']}, {result['max_tokens']} tokens each "
        f"({result['date']}, torch {result['torch']})",
        "",
        "| mode | samples | generated tokens | seconds | tokens/s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for mode in ("batched", "one_by_one"):
        r = result[mode]
        rows.append(f"| {mode.replace('_', ' ')} | {r['samples']} | {r['tokens']} | {r['seconds']} | {r['tokens_per_s']} |")
    rows.append(f"\nBatched is {result['speedup']}x the one-by-one rate.")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="directory for the JSON and markdown results")
    parser.add_argument("--tiny", action="store_true", help="tiny model on the CPU (smoke run)")
    parser.add_argument("--group", type=int, default=8, help="samples per group (G)")
    parser.add_argument("--tokens", type=int, default=None, help="tokens per sample (default 1024; 64 with --tiny)")
    parser.add_argument("--budget-s", type=float, default=170.0,
                        help="seconds from start after which the one-by-one run stops (keeps the H200 run < 4 min)")
    args = parser.parse_args(argv)
    args.tokens = args.tokens or (64 if args.tiny else 1024)
    if not args.tiny and not torch.cuda.is_available():
        print("no CUDA device: run with --tiny for the CPU smoke run", file=sys.stderr)
        return 2
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "generation_throughput.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "generation_throughput.md").write_text(table(result) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
