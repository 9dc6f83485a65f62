"""Benchmark: one role's SFT on a distillation at a given model size, depth, batch and rate, its seconds a step and its
held-out pass rate judged by the real evaluator (Coder) or validator (Proposer); one sample a row, so a screen, not the
held-out protocol's measure.

CPU (results in docs/BENCHMARKS.md, The Coder from zero):
    .venv/bin/python bench/sft_depth.py --distill ~/.cache/kernelzero/demo/distill-KEY --role coder --layers 2 \
        --out /tmp/depth-coder-2
GPU (the small Coder's SFT is half the GPU demo; is a step launch-bound, so that larger batches cost no more?):
    KERNELZERO_PROPOSER_SCALE=3.0517578125e-05 kernelzero distill --modules 8000 --audit-share 0 --out /tmp/distill
    python3 bench/sft_depth.py --distill /tmp/distill --size small --layers 8 --device cuda --batch-size 16 \
        --learning-rate 4e-3 --out $OUT/small-16
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distill", required=True, type=Path, help="a `kernelzero distill` output folder")
    parser.add_argument("--role", choices=("coder", "proposer"), default="coder")
    parser.add_argument("--size", choices=("tiny", "small"), default="tiny", help="the model size it starts from")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where it trains and is judged")
    parser.add_argument("--batch-size", type=int, default=0, help="rows a step (default: the demo plan's)")
    parser.add_argument("--learning-rate", type=float, default=0.0, help="peak rate (default: the demo plan's)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", type=int, default=64, help="held-out rows judged")
    parser.add_argument("--epochs", type=float, default=0.0, help="SFT epochs (default: the demo plan's)")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kernelzero.bootstrap import init_model
    from kernelzero.bootstrap.from_zero import DEMO_PLAN, longest_answer
    from kernelzero.bootstrap.heldout_judge import HeldOutJudge, read_heldout
    from kernelzero.bootstrap.sft import run_sft
    from kernelzero.config import load_config
    from kernelzero.kit.models import MODEL_SIZES, VOCAB_SIZES

    torch.set_num_threads(1)  # as each role's SFT process starts in the bootstrap of a 2-core machine
    config = load_config(None)
    config.evaluator.device = config.validator.device = args.device
    config.evaluator.trials = 2  # as the demo judges
    size = f"{args.size}-{args.layers}-layers"
    init_model.MODEL_SIZES[size] = {**MODEL_SIZES[args.size], "num_hidden_layers": args.layers}
    init_model.VOCAB_SIZES[size] = VOCAB_SIZES[args.size]
    corpus = [str(args.distill / f"{name}_train.jsonl") for name in ("coder", "proposer")]
    init_model.init_model(str(args.out / "init"), size, corpus, seed=args.seed)
    plan = getattr(DEMO_PLAN, args.role)
    data = args.distill / f"{args.role}_train.jsonl"
    batch_size, learning_rate = args.batch_size or plan.batch_size, args.learning_rate or plan.learning_rate
    steps_at: dict[int, float] = {}  # step -> when it ended: a step's time without the SFT's setup
    started = time.perf_counter()
    report = run_sft(str(data), str(args.out / "init"), str(args.out / args.role), epochs=args.epochs or plan.epochs,
                     learning_rate=learning_rate, batch_size=batch_size, lora_rank=0, device=args.device,
                     seed=args.seed, progress=lambda step, _: steps_at.setdefault(step, time.perf_counter()))
    sft_s = time.perf_counter() - started
    first, last = min(steps_at), max(steps_at)
    result = {"role": args.role, "size": args.size, "layers": args.layers, "device": args.device, "seed": args.seed,
              "epochs": args.epochs or plan.epochs, "batch_size": batch_size, "learning_rate": learning_rate,
              "steps": report.steps, "sft_s": round(sft_s, 1),
              "s_per_step": round((steps_at[last] - steps_at[first]) / max(1, last - first), 4),
              "last_loss": report.last_loss}
    model_dir = args.out / args.role
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(args.device)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = read_heldout(args.distill / f"{args.role}_heldout.jsonl", args.rows)
    section = getattr(config, args.role)
    for name, temperature in (("sampled", section.temperature), ("greedy", 0.0)):
        section.temperature = temperature
        judge = HeldOutJudge(args.role, rows, config, max_tokens=longest_answer(model_dir, data))
        try:
            passed, total = judge.pass_rate(model, tokenizer)
        finally:
            judge.close()
        result[name] = f"{passed}/{total}"
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
