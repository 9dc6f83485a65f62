"""Benchmark: the evaluator stage's poll size, a sample a worker (as before 2026-12-07) against several, on one set of
samples (a distillation's held-out teacher answers, a third of them altered so that they fail), side by side; wall
of each.

A poll's samples are handled `workers` at a time and committed together, so with a sample a worker every poll waits
for its slowest job. The pool starts before the clock does; its result cache is off, so every run judges every
sample. Not a test: verdicts are counted, not asserted.

    KERNELZERO_PROPOSER_SCALE=3.0517578125e-05 kernelzero distill --modules 8000 --audit-share 0 --out /tmp/distill
    .venv/bin/python bench/evaluator_polls.py --distill /tmp/distill --samples 48 --rounds 1,4 --reps 2
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path

import anyio


def samples(distill: Path, n: int) -> list:
    from kernelzero.kit.codeblocks import last_python_block
    from kernelzero.schemas import SampleGenerated

    rows = [json.loads(line) for line in (distill / "coder_heldout.jsonl").read_text().splitlines()[:n]]
    out = []
    for index, row in enumerate(rows):
        source = last_python_block(row["completion"], "ModelNew")
        if index % 3 == 2:  # a third of them wrong: the kernel's output scaled
            source = source.replace("return out", "return out * 1.5", 1) if "return out" in source else source[:-40]
        out.append(SampleGenerated(sample_id=f"s{index}", module_id=row["module_id"], backend="triton", source=source,
                                   problem_source=row["reference"], group_size=1, group_index=0, apis=row["apis"],
                                   level=1, split="train"))
    return out


async def judge(config, batch: list, rounds: int) -> tuple[float, dict]:
    from kernelzero.gpu_workers.pool import EvaluatorPool
    from kernelzero.gpu_workers.service import EvaluatorStage
    from kernelzero.log import open_log
    from kernelzero.schemas import make_event
    from kernelzero.stage import publish, run_stage

    with tempfile.TemporaryDirectory() as tmp:
        async with await open_log(f"embedded:{tmp}/log.sqlite") as log, \
                EvaluatorPool(config.evaluator, use_cache=False) as pool:
            await publish(log, [make_event(sample, correlation_id=sample.module_id, producer="bench")
                                for sample in batch], "bench")
            stage = EvaluatorStage(pool, poll_rounds=rounds)
            verdicts: collections.Counter = collections.Counter()
            original = stage.handle

            async def counted(event):
                events = await original(event)
                verdicts.update(e.payload.verdict for e in events)
                return events

            stage.handle = counted
            started = time.perf_counter()
            await run_stage(log, stage, idle_exit_s=0.5)
            return time.perf_counter() - started, dict(verdicts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distill", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--rounds", default="1,4", help="samples a worker a poll, comma-separated")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()

    from kernelzero.config import load_config

    config = load_config(None)
    config.evaluator.device = args.device
    config.evaluator.trials = 2  # as the demo judges
    batch = samples(args.distill, args.samples)
    results = collections.defaultdict(list)
    for rep in range(args.reps):
        for rounds in (int(r) for r in args.rounds.split(",")):
            wall, verdicts = anyio.run(judge, config, batch, rounds)
            results[rounds].append(round(wall, 1))
            print(json.dumps({"rep": rep, "rounds": rounds, "wall_s": round(wall, 1), "verdicts": verdicts}),
                  flush=True)
    print(json.dumps({"samples": len(batch), "device": args.device, "wall_s_by_rounds": dict(results)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
