"""Benchmark: the Coder stage answering a held-out measurement with a trained Coder, its modules polled a few at a time against many at a time (one generation per poll and kind); speed only, the same sampling settings.

A demo's bootstrap (its models folder and distillation folder, in the demo's cache) gives the
Coder and the held-out rows; each setting runs on a fresh embedded log in a temporary folder:

    .venv/bin/python bench/heldout_generation.py --models ~/.cache/kernelzero/demo/models-KEY \
        --rows ~/.cache/kernelzero/demo/distill-KEY/coder_heldout.jsonl --polls 4,64

Prints, per poll size, the stage's wall time and the samples it wrote; the settings are timed
alternately, twice each, so that a machine's drift falls on both.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import tempfile
import time
from pathlib import Path


def answer(models: Path, rows: Path, limit: int, group_size: int, poll: int, device: str) -> tuple[float, int]:
    """Seconds the Coder stage took to answer `limit` held-out rows (sampled and greedy), and samples written."""
    import anyio

    from kernelzero.app.heldout import publish_heldout
    from kernelzero.app.serve import serve_until_idle
    from kernelzero.config import Config
    from kernelzero.log import open_log

    with tempfile.TemporaryDirectory() as tmp:
        config = Config()
        config.log.url = f"embedded:{tmp}/log.sqlite"
        sft = json.loads((models / "sft.json").read_text())
        coder = config.coder
        coder.backend, coder.device, coder.prompt, coder.model = "transformers", device, "compact", str(models / "coder")
        coder.group_size, coder.max_tokens, coder.max_inflight_groups = group_size, sft["coder"]["max_tokens"], poll
        if publish_heldout(config, rows, limit, "bench") != 0:
            raise SystemExit(2)
        started = time.perf_counter()
        if serve_until_idle("coder", config, idle_s=1.0) != 0:
            raise SystemExit("the coder stage failed")
        took = time.perf_counter() - started

        async def count() -> int:
            async with await open_log(config.log.url) as log:
                return sum((await log.end_offsets("samples.generated")).values())
        return took, anyio.run(count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="a demo bootstrap's models folder (sft.json, coder/)")
    parser.add_argument("--rows", type=Path, required=True, help="its distillation's coder_heldout.jsonl")
    parser.add_argument("--limit", type=int, default=32, help="held-out rows (the demo's default)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--polls", default="4,64", help="modules per poll to compare, comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    polls = [int(p) for p in args.polls.split(",")]
    results: dict[int, list] = {p: [] for p in polls}
    for _ in range(args.repeats):
        for poll in polls:
            results[poll].append(answer(args.models, args.rows, args.limit, args.group_size, poll, args.device))
            print(f"poll {poll}: {results[poll][-1][0]:.1f} s, {results[poll][-1][1]} samples", flush=True)
    print(f"\n{datetime.date.today()} {platform.processor() or platform.machine()}, {args.limit} held-out rows, "
          f"G={args.group_size}, {args.device}")
    for poll, runs in results.items():
        print(f"modules per poll {poll:>3}: {', '.join(f'{s:.1f} s' for s, _ in runs)} ({runs[0][1]} samples)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
