"""What judging one timed call costs on a GPU, step by step, at a problem's output size: the checksums of its inputs, its
output's digest and judgement, the refill and the poisoned memory around it; not the candidate, not the timing loop.

Every timed call pays these (gpu_workers/trial.py: `_before_call`, `_judge`); at KernelBench's real sizes they
are most of a call. Times are medians of a few synchronized runs on whatever the card is doing; they say
which step to cut, not what a whole evaluation costs (bench/eval_stages.py does that).

    python3 bench/judge_cost.py --shape 4096,393216       # KernelBench level 1 ReLU's input and output
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from kernelzero.gpu_workers import compare, digest


def median_ms(step, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        started = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def poison_one_block(like: torch.Tensor) -> None:
    block = torch.empty(like.numel() * like.element_size(), dtype=torch.uint8, device=like.device)
    block.fill_(compare.POISON_BYTE)
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="4096,393216", help="the input's and output's shape, comma-separated")
    args = parser.parse_args()
    shape = tuple(int(n) for n in args.shape.split(","))
    x = torch.rand(shape, device="cuda")
    out = torch.relu(x)
    weights = compare.position_weights(compare.CHUNK, 12345, x.device)
    kept = digest.make(out)
    flat = out.reshape(-1)
    steps = {
        "the kernel (torch.relu)": lambda: torch.relu(x),
        "refill: draw (torch.rand)": lambda: torch.rand(shape, device="cuda"),
        "refill: copy into the buffer": lambda: x.copy_(out),
        "an input's checksum (compare.fingerprint), twice a call": lambda: compare.fingerprint(x, weights),
        "a poisoned block": lambda: poison_one_block(out),
        "the output judged by its digest": lambda: kept.judge(out, 1e-2, 1e-2),
        "  of which its block sums": lambda: digest._block_sums(flat, kept.block),
        "a reference output's digest (once per set)": lambda: digest.make(out),
    }
    print(f"{torch.cuda.get_device_name()}, shape {shape} float32 ({x.numel() * 4 / 1e9:.1f} GB a tensor)")
    for name, step in steps.items():
        print(f"{median_ms(step):9.2f} ms  {name}")


if __name__ == "__main__":
    main()
