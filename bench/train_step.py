"""Benchmark: time and peak memory of one CA-GRPO policy update (random-weight Qwen2-0.5B shape, G = 8, 1,024-token completions).

Usage (H200, < 4 minutes):  python bench/train_step.py --out DIR
CPU smoke run (seconds):    python bench/train_step.py --tiny --out DIR
Writes DIR/train_step.json and DIR/train_step.md and prints the table last. The weights are
random: the numbers are throughput and memory only, not learning. Completion tokens are random
ids; behaviour log-probabilities are the model's own (one untimed no-grad pass), so ratios are
near 1 as in an on-policy step. It does not measure generation or checkpoint writing.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import msgspec
import torch

from kernelzero.config import TrainerConfig
from kernelzero.consumers.policy_update import Batch, PolicyLearner
from kernelzero.kit.models import QWEN2_0_5B, TINY_QWEN2
from kernelzero.schemas.messages import TrainingSample

# (name, lora_rank, micro_batch_size, gradient_checkpointing)
VARIANTS = [
    ("lora16 mb8", 16, 8, False),
    ("lora16 mb4", 16, 4, False),
    ("lora16 mb8 ckpt", 16, 8, True),
    ("full mb8 ckpt", 0, 8, True),
]


def build_model(shape: dict, device: torch.device, dtype: torch.dtype, seed: int = 0):
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = dict(shape)
    model_type = settings.pop("model_type")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **settings), dtype=dtype)
    return model.to(device)


def make_group(learner: PolicyLearner, group: int, prompt_len: int, completion_len: int, vocab: int,
               seed: int = 0) -> list[TrainingSample]:
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab, (prompt_len,), generator=generator).tolist()
    samples = [
        TrainingSample(sample_id=f"s{i}", prompt_token_ids=prompt,
                       token_ids=torch.randint(0, vocab, (completion_len,), generator=generator).tolist(),
                       logprobs=[0.0] * completion_len, advantage=(i - (group - 1) / 2) / group, reward=0.0)
        for i in range(group)
    ]
    with torch.no_grad():
        logp = learner.forward_logprobs(learner.model, Batch(samples, learner.device, 0, learner.config))
    return [msgspec.structs.replace(s, logprobs=logp[i].float().tolist()) for i, s in enumerate(samples)]


def run_variant(name: str, lora_rank: int, micro: int, checkpointing: bool, args, device: torch.device) -> dict:
    shape = TINY_QWEN2 if args.tiny else QWEN2_0_5B
    config = TrainerConfig(lora_rank=lora_rank, micro_batch_size=micro, gradient_checkpointing=checkpointing,
                           learning_rate=1e-5)
    # A frozen LoRA base can be bf16; full fine-tuning keeps float32 master weights (bf16 autocast on CUDA).
    dtype = torch.bfloat16 if device.type == "cuda" and lora_rank > 0 else torch.float32
    model = build_model(shape, device, dtype)
    learner = PolicyLearner(model, config)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in learner.model.parameters() if p.requires_grad)
    samples = make_group(learner, args.group, args.prompt_len, args.completion_len, shape["vocab_size"])
    learner.version = 0
    learner.step(samples)  # warm-up: allocator, kernels, optimizer state
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        samples = [msgspec.structs.replace(s, policy_version=learner.version) for s in samples]
        started = time.perf_counter()
        metrics = learner.step(samples)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    tokens = args.group * (args.prompt_len + args.completion_len)
    result = {
        "variant": name, "lora_rank": lora_rank, "micro_batch": micro, "checkpointing": checkpointing,
        "params_m": params / 1e6, "trainable_m": trainable / 1e6, "step_s_median": statistics.median(times),
        "step_s_all": times, "tokens_per_s": tokens / statistics.median(times), "peak_gib": peak,
        "loss": metrics["loss"], "grad_norm": metrics["grad_norm"],
    }
    del learner, model, samples
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def _gib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for train_step.json and train_step.md")
    parser.add_argument("--tiny", action="store_true", help="tiny model on the CPU (smoke run)")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--completion-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant, after one warm-up step")
    args = parser.parse_args()
    if args.tiny:
        args.group, args.prompt_len, args.completion_len, args.steps = 4, 16, 64, 2
    device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    if not args.tiny and device.type != "cuda":
        parser.error("no CUDA device: run with --tiny for the CPU smoke run")
    variants = VARIANTS[:2] if args.tiny else VARIANTS
    started = time.perf_counter()
    rows = [run_variant(*variant, args, device) for variant in variants]
    env = {
        "date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name() if device.type == "cuda"
        else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)",
        "torch": torch.__version__, "model": "tiny qwen2" if args.tiny else "qwen2-0.5B shape, random weights",
        "group": args.group, "prompt_len": args.prompt_len, "completion_len": args.completion_len,
        "steps": args.steps, "wall_s": time.perf_counter() - started,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_step.json").write_text(json.dumps({"env": env, "results": rows}, indent=1))
    header = "| variant | params (M) | trainable (M) | step (s, median) | tokens/s | peak (GiB) |\n|---|---|---|---|---|---|\n"
    table = header + "".join(
        f"| {r['variant']} | {r['params_m']:.1f} | {r['trainable_m']:.2f} | {r['step_s_median']:.3f} | "
        f"{r['tokens_per_s']:.0f} | {_gib(r['peak_gib'])} |\n" for r in rows
    )
    intro = (f"One CA-GRPO update on {env['device']}, {env['model']}, G = {args.group}, prompt {args.prompt_len} + "
             f"completion {args.completion_len} tokens, {args.steps} timed steps after a warm-up; {env['date']}.\n\n")
    (out / "train_step.md").write_text(intro + table)
    print(intro + table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
