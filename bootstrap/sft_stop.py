"""The SFT stopping rule: the held-out pass@1 of the model being trained, checked every N steps; training stops once it is surely in the band.

Rule: every `check_every` optimizer steps, each held-out prompt gets one sample at the role's
temperature; the Coder's samples are judged by the real evaluator (pass = `correct`), the
Proposer's by the real validator (pass = accepted). Training stops at the first check whose 95%
Wilson interval lies at or above `band_low`, so that RL starts from a model that solves some
held-out problems but not most of them; a check whose rate jumps past `band_high` still stops,
and the report says so. Without such a check, training runs its epochs. It does not hold out
anything itself, nor judge: the caller passes a judge (bootstrap/heldout_judge.py samples rows
whose API sets the training data lacks and judges them with the real stages). One sample a row
is an unbiased but noisy reading of the pass@1 the experiment measures with eight: stopping on
the rate itself stopped a Coder at 16 of 64 (0.25) that eight samples a row put at 0.184.
"""

from __future__ import annotations

import sys
from typing import Protocol

import msgspec
from transformers import TrainerCallback

from kernelzero.kit.heldout_protocol import wilson


class Check(msgspec.Struct, frozen=True):
    step: int
    loss: float | None
    pass_rate: float
    passed: int
    total: int
    interval: tuple[float, float]  # 95% Wilson


class Judge(Protocol):
    def pass_rate(self, model, tokenizer) -> tuple[int, int]:
        """(passed, total) on the held-out rows for the model as it is now; leaves it in train mode."""


class BandStop(TrainerCallback):
    """A transformers callback applying the rule of this module's docstring; `checks` keeps every measurement."""

    def __init__(self, judge: Judge, *, band_low: float, band_high: float, check_every: int) -> None:
        self.judge, self.band_low, self.band_high, self.check_every = judge, band_low, band_high, check_every
        self.checks: list[Check] = []
        self.stopped = "epochs"  # or "in_band", "past_band"

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.check_every:
            return control
        losses = [entry["loss"] for entry in state.log_history if "loss" in entry]
        passed, total = self.judge.pass_rate(model, processing_class)
        rate = passed / total if total else 0.0
        low, high = wilson(rate, total)
        check = Check(step=state.global_step, loss=losses[-1] if losses else None, pass_rate=rate, passed=passed,
                      total=total, interval=(round(low, 4), round(high, 4)))
        self.checks.append(check)
        print(f"sft check at step {check.step}: held-out pass@1 {passed}/{total} [{low:.3f}, {high:.3f}], "
              f"loss {check.loss}", file=sys.stderr, flush=True)
        if total and low >= self.band_low:
            self.stopped = "in_band" if rate <= self.band_high else "past_band"
            control.should_training_stop = True
        return control
