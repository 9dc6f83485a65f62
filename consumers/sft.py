"""`kernelzero sft`: supervised warm start of the Coder or the Proposer with trl's SFTTrainer on prompt/completion pairs.

Input: JSON lines, one object per line with non-empty string fields `prompt` and `completion`
(what `kernelzero replay sft` writes; other fields are ignored). The loss covers the completion
only. Output: a LoRA adapter directory over --model (rank > 0; it names its base model) or a
full model directory with its tokenizer, written to a temporary sibling and renamed into place,
so --out is complete or absent. The prompt text is used as given: no chat template or
instruction is added. Prompt and completion are tokenized apart, the completion followed by the
stop token: that is how a generator sees them (the prompt alone, then what it samples), whereas
tokenizing prompt + completion at once lets tokens merge across the boundary and trains the model
on a context it never sees when it answers. Nothing here is imported at CLI start-up beyond argparse.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import msgspec


class SftError(ValueError):
    """The dataset or the output directory is unusable; the message says which line or path and why."""


class SftReport(msgspec.Struct, kw_only=True):
    out: str
    examples: int
    steps: int
    first_loss: float
    last_loss: float
    checks: list = []  # consumers.sft_stop.Check of every held-out measurement, in order
    stopped: str = "epochs"  # "in_band" / "past_band": the held-out rule stopped it (consumers/sft_stop.py)


def add_arguments(parser) -> None:
    parser.add_argument("--data", required=True, metavar="FILE", help="JSON lines with prompt and completion fields")
    parser.add_argument("--role", choices=("coder", "proposer"), default="coder",
                        help="whose model to warm-start (default model: [ROLE] model in the config)")
    parser.add_argument("--model", metavar="DIR", help="the starting model directory (Hugging Face layout)")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the trained weights go (must not exist)")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="default 2e-4 with LoRA, 2e-5 for full fine-tuning")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=2048, help="tokens per example; longer ones are cut")
    parser.add_argument("--lora-rank", type=int, default=None, help="0 = full fine-tuning (default: [trainer] lora_rank)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heldout", metavar="FILE",
                        help="held-out rows (kernelzero distill's *_heldout.jsonl): stop once their pass@1 reaches the band")
    parser.add_argument("--stop-band", default="0.2,0.6", metavar="LOW,HIGH",
                        help="the held-out pass@1 band that stops training (default 0.2,0.6)")
    parser.add_argument("--check-every", type=int, default=50, metavar="STEPS", help="steps between held-out checks")
    parser.add_argument("--heldout-limit", type=int, default=16, metavar="N", help="held-out rows per check (default 16)")


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


def run_sft(data: str, model_dir: str, out: str, *, epochs: float = 1.0, learning_rate: float | None = None,
            batch_size: int = 4, max_length: int = 2048, lora_rank: int = 16, lora_alpha: int = 32,
            device: str = "auto", seed: int = 0, stop=None) -> SftReport:
    """Train and write `out` atomically; returns the losses and the held-out checks of `stop` (a sft_stop.BandStop)."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    from kernelzero.models import load_model, pick_device

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
        completion_only_loss=True, logging_steps=1, save_strategy="no", report_to=[], seed=seed,
        use_cpu=torch_device.type == "cpu", bf16=torch_device.type == "cuda", lr_scheduler_type="constant",
        disable_tqdm=True,
    )
    peft_config = LoraConfig(r=lora_rank, lora_alpha=lora_alpha, target_modules="all-linear",
                             task_type="CAUSAL_LM") if lora_rank > 0 else None
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(tokenized(pairs, tokenizer, max_length)),
                         processing_class=tokenizer, peft_config=peft_config, callbacks=[stop] if stop else None)
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


def band_stop(args, config):
    """The held-out stopping rule the command line asks for (None without --heldout)."""
    if not args.heldout:
        return None
    from kernelzero.consumers.sft_stop import BandStop, HeldOutJudge, read_heldout

    try:
        low, high = (float(x) for x in args.stop_band.split(","))
        rows = read_heldout(args.heldout, args.heldout_limit)
    except (ValueError, OSError) as exc:
        raise SftError(f"--heldout {args.heldout} / --stop-band {args.stop_band}: {exc}") from None
    if not rows or not 0 <= low <= high <= 1:
        raise SftError(f"need held-out rows and 0 <= LOW <= HIGH <= 1 (got {len(rows)} rows, band {args.stop_band})")
    judge = HeldOutJudge(args.role, rows, config, max_tokens=getattr(config, args.role).max_tokens)
    return BandStop(judge, band_low=low, band_high=high, check_every=max(1, args.check_every))


def main(args, config) -> int:
    model_dir = args.model or getattr(config, args.role).model
    if not model_dir:
        print(f"kernelzero sft: no model: pass --model DIR or set [{args.role}] model", file=sys.stderr)
        return 2
    from kernelzero.models import ModelLoadError

    lora_rank = config.trainer.lora_rank if args.lora_rank is None else args.lora_rank
    stop = None
    try:
        stop = band_stop(args, config)
        report = run_sft(args.data, model_dir, args.out, epochs=args.epochs, learning_rate=args.learning_rate,
                         batch_size=args.batch_size, max_length=args.max_length, lora_rank=lora_rank,
                         lora_alpha=config.trainer.lora_alpha, device=args.device, seed=args.seed, stop=stop)
    except (SftError, ModelLoadError) as exc:
        print(f"kernelzero sft: {exc}", file=sys.stderr)
        return 2
    finally:
        if stop is not None:
            stop.judge.close()
    for check in report.checks:
        print(f"  step {check.step}: loss {check.loss}, held-out pass@1 {check.passed}/{check.total}")
    print(f"sft {args.role}: {report.examples} examples, {report.steps} steps, "
          f"loss {report.first_loss:.4f} -> {report.last_loss:.4f}, stopped by {report.stopped}, weights in {report.out}")
    return 0
