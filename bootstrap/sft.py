"""`kernelzero sft`: supervised warm start of the Coder or the Proposer with trl's SFTTrainer on prompt/completion pairs.

Input: JSON lines, one object per line with non-empty string fields `prompt` and `completion`
(what `kernelzero replay sft` writes; other fields are ignored). The loss covers the completion
only. Output: a LoRA adapter directory over --model (rank > 0; it names its base model) or a
full model directory with its tokenizer, written to a temporary sibling and renamed into place,
so --out is complete or absent. The prompt text is used as given: no chat template or
instruction is added. Prompt and completion are tokenized apart, the completion followed by the
stop token: that is how a generator sees them (the prompt alone, then what it samples), whereas
tokenizing prompt + completion at once lets tokens merge across the boundary and trains the model
on a context it never sees when it answers. The command line is bootstrap/sft_cli.py.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable

import msgspec


# a linear warm-up over this share of the steps, then a cosine decay to 0: a from-scratch model at a high
# learning rate diverges without the warm-up, and the decay settles it (a constant rate left the tiny Coder's
# loss jumping between checks); batches hold rows of similar length, so little compute goes to padding
WARMUP = 0.05
ADAM_BETA2 = 0.95  # a shorter memory of gradient scale than 0.999: small batches at a high rate stay stable
# a log entry (the loss averaged since the last) every this share of the steps, rounded up: an entry a step cost two
# synchronizations of the GPU a step (docs/BENCHMARKS.md); the first and last losses reported are such means
LOGGING_SHARE = 0.01


class SftError(ValueError):
    """The dataset or the output directory is unusable; the message says which line or path and why."""


class SftReport(msgspec.Struct, kw_only=True):
    out: str
    examples: int
    steps: int
    first_loss: float
    last_loss: float
    checks: list = []  # sft_stop.Check of every held-out measurement, in order
    stopped: str = "epochs"  # "in_band" / "past_band": the held-out rule stopped it (bootstrap/sft_stop.py)


def read_pairs(path: str | os.PathLike) -> list[dict[str, str]]:
    """The dataset's prompt/completion pairs; raises SftError naming the first bad line."""
    pairs = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise SftError(f"cannot read {path}: {exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SftError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) and row[k] for k in ("prompt", "completion")):
            raise SftError(f"{path}:{number}: needs non-empty string fields 'prompt' and 'completion'")
        pairs.append({"prompt": row["prompt"], "completion": row["completion"]})
    if not pairs:
        raise SftError(f"{path} holds no examples")
    return pairs


def tokenized(pairs: list[dict[str, str]], tokenizer, max_length: int) -> list[dict[str, list[int]]]:
    """Rows of input_ids (prompt, completion, stop token) and completion_mask, cut at max_length."""
    rows = []
    for pair in pairs:
        prompt = tokenizer(pair["prompt"])["input_ids"]
        completion = tokenizer(pair["completion"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append({"input_ids": (prompt + completion)[:max_length],
                     "completion_mask": ([0] * len(prompt) + [1] * len(completion))[:max_length]})
    return rows


def _step_callback(progress: Callable[[int, int], None]):
    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            progress(state.global_step, state.max_steps)

    return Steps()


def precision(device_type: str, dtype: str) -> dict[str, bool | None]:
    """The trainer's precision settings for a model served in `dtype` on `device_type`."""
    on_cuda = device_type == "cuda"
    # bfloat16 autocast sends attention to cuDNN, which plans every new batch shape anew: a step of the small Coder
    # (rows of varied length) took 160 ms on an H100 against 40 ms in float32 (docs/BENCHMARKS.md)
    return {"bf16": on_cuda and dtype != "float32", "tf32": True if on_cuda and dtype == "float32" else None}


def run_sft(data: str, model_dir: str, out: str, *, epochs: float = 1.0, learning_rate: float | None = None,
            batch_size: int = 4, max_length: int = 2048, lora_rank: int = 16, lora_alpha: int = 32,
            device: str = "auto", dtype: str = "auto", seed: int = 0, stop=None,
            gradient_checkpointing: bool = False, progress: Callable[[int, int], None] | None = None) -> SftReport:
    """Train and write `out` atomically; returns the losses and the held-out checks of `stop` (a sft_stop.BandStop).

    `dtype` is the precision the model will be served in: on CUDA "auto" and "bfloat16" train under bfloat16
    autocast, "float32" in float32 with TF32 matrix products (the CPU always trains in float32). `progress(step,
    steps)` is called after every optimizer step.
    """
    from datasets import Dataset
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    from kernelzero.kit.models import load_model, pick_device

    final = Path(out)
    if final.exists() and any(final.iterdir()):
        raise SftError(f"{final} exists and is not empty; choose a new --out")
    pairs = read_pairs(data)
    torch_device = pick_device(device)
    model, tokenizer = load_model(str(Path(model_dir).resolve()), device=str(torch_device), dtype="float32")
    tokenizer.padding_side = "right"
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    args = SFTConfig(
        output_dir=str(tmp / "trainer"), num_train_epochs=epochs, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate or (2e-4 if lora_rank > 0 else 2e-5), max_length=max_length,
        completion_only_loss=True, logging_steps=LOGGING_SHARE, save_strategy="no", report_to=[], seed=seed,
        use_cpu=torch_device.type == "cpu", lr_scheduler_type="cosine", **precision(torch_device.type, dtype),
        warmup_steps=WARMUP, adam_beta2=ADAM_BETA2, train_sampling_strategy="group_by_length", disable_tqdm=True,
        # trl turns it on by default: recomputing a tiny model's activations cost 15% of a CPU step for no memory
        # that matters, the losses the same to the last digit (docs/BENCHMARKS.md); a large model asks for it
        gradient_checkpointing=gradient_checkpointing,
    )
    peft_config = LoraConfig(r=lora_rank, lora_alpha=lora_alpha, target_modules="all-linear",
                             task_type="CAUSAL_LM") if lora_rank > 0 else None
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(tokenized(pairs, tokenizer, max_length)),
                         processing_class=tokenizer, peft_config=peft_config,
                         callbacks=[c for c in (stop, _step_callback(progress) if progress else None) if c])
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # a dict per step drowns the held-out checks; the report keeps the losses
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    try:
        trainer.save_model(str(tmp))
        if lora_rank <= 0:
            tokenizer.save_pretrained(str(tmp))
        shutil.rmtree(tmp / "trainer", ignore_errors=True)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            final.rmdir()  # empty, checked above
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return SftReport(out=str(final), examples=len(pairs), steps=trainer.state.global_step,
                     first_loss=losses[0] if losses else float("nan"), last_loss=losses[-1] if losses else float("nan"),
                     checks=list(stop.checks) if stop else [], stopped=stop.stopped if stop else "epochs")
