"""`kernelzero sft`: the command line of the supervised warm start (bootstrap/sft.py), with the held-out stopping rule when --heldout is given."""

from __future__ import annotations

import sys

from kernelzero.bootstrap.sft import SftError, run_sft


def add_arguments(parser) -> None:
    parser.add_argument("--data", required=True, metavar="FILE", help="JSON lines with prompt and completion fields")
    parser.add_argument("--role", choices=("coder", "proposer"), default="coder",
                        help="whose model to warm-start (its default model and precision: [ROLE] model and dtype "
                             "in the config)")
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


def band_stop(args, config):
    """The held-out stopping rule the command line asks for (None without --heldout)."""
    if not args.heldout:
        return None
    from kernelzero.bootstrap.heldout_judge import HeldOutJudge, read_heldout
    from kernelzero.bootstrap.sft_stop import BandStop

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
    from kernelzero.kit.models import ModelLoadError

    lora_rank = config.trainer.lora_rank if args.lora_rank is None else args.lora_rank
    stop = None
    try:
        stop = band_stop(args, config)
        report = run_sft(args.data, model_dir, args.out, epochs=args.epochs, learning_rate=args.learning_rate,
                         batch_size=args.batch_size, max_length=args.max_length, lora_rank=lora_rank,
                         lora_alpha=config.trainer.lora_alpha, device=args.device,
                         dtype=getattr(config, args.role).dtype, seed=args.seed, stop=stop,
                         gradient_checkpointing=config.trainer.gradient_checkpointing)
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
