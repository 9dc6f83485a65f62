"""The SFT stopping rule: the held-out pass@1 of the model being trained, checked every N steps; training stops once it reaches the band.

Rule (documented in docs/trainer.md): every `check_every` optimizer steps, each held-out prompt
gets one sample at the role's temperature; the Coder's samples are judged by the real evaluator
(pass = `correct`), the Proposer's by the real validator (pass = accepted). Training stops at
the first check whose pass rate is at least `band_low`, so that RL starts from a model that
solves some held-out problems but not most of them; a check that jumps past `band_high` still
stops, and the report says so. Without such a check, training runs its epochs. It does not
hold out anything itself: the caller passes rows whose API sets the training data lacks.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec
from transformers import TrainerCallback

from kernelzero.codeblocks import last_python_block


class Check(msgspec.Struct, frozen=True):
    step: int
    loss: float | None
    pass_rate: float
    passed: int
    total: int


class HeldOutRow(msgspec.Struct, frozen=True):
    prompt: str = ""  # what a model is asked (the SFT check samples from it)
    reference: str = ""  # the module a Coder row asks for
    apis: list[str] = []


def read_heldout(path: str | os.PathLike, limit: int | None = None) -> list[HeldOutRow]:
    """The held-out rows (JSON lines as `kernelzero distill` writes them), at most `limit`."""
    rows = [msgspec.convert(json.loads(line), HeldOutRow, strict=False)
            for line in Path(path).read_text().splitlines() if line.strip()]
    return rows[:limit] if limit else rows


class HeldOutJudge:
    """Samples one answer per held-out row from an in-memory model and judges it with the real evaluator or validator."""

    def __init__(self, role: str, rows: list[HeldOutRow], config: Any, *, max_tokens: int) -> None:
        self.role, self.rows, self.config, self.max_tokens = role, rows, config, max_tokens
        self._loop = asyncio.new_event_loop()
        self._pool = None

    def pass_rate(self, model: Any, tokenizer: Any) -> tuple[int, int]:
        """(passed, total) for the model as it is now; the model is back in train mode afterwards."""
        from kernelzero.producers.backend_transformers import TransformersGenerator

        section = getattr(self.config, self.role)
        model.eval()
        try:
            generator = TransformersGenerator(loaded=(model, tokenizer), seed=self.config.coder.seed)
            answers = generator.generate_sync([r.prompt for r in self.rows], 1, temperature=section.temperature,
                                              top_p=1.0, max_tokens=self.max_tokens)
        finally:
            model.train()
        texts = [group[0].text for group in answers]
        judged = self._coder(texts) if self.role == "coder" else self._proposer(texts)
        return sum(judged), len(judged)

    def _coder(self, texts: list[str]) -> list[bool]:
        sources = [last_python_block(text, "ModelNew") for text in texts]
        return self._loop.run_until_complete(self._evaluate(sources))

    async def _evaluate(self, sources: list[str | None]) -> list[bool]:
        from kernelzero.gpu_workers import EvaluatorPool

        if self._pool is None:
            self._pool = await EvaluatorPool(self.config.evaluator, use_cache=False).__aenter__()

        async def judge(row: HeldOutRow, source: str | None) -> bool:
            return source is not None and (await self._pool.evaluate(row.reference, source)).verdict == "correct"

        return list(await asyncio.gather(*(judge(row, source) for row, source in zip(self.rows, sources))))

    def _proposer(self, texts: list[str]) -> list[bool]:
        from kernelzero.consumers.validator import validate
        from kernelzero.producers.proposer import last_model_block

        return [validate(last_model_block(text), row.apis, self.config.validator).ok for row, text in zip(self.rows, texts)]

    def close(self) -> None:
        if self._pool is not None:
            self._loop.run_until_complete(self._pool.__aexit__(None, None, None))
        self._loop.close()


class BandStop(TrainerCallback):
    """A transformers callback applying the rule of this module's docstring; `checks` keeps every measurement."""

    def __init__(self, judge: HeldOutJudge, *, band_low: float, band_high: float, check_every: int) -> None:
        self.judge, self.band_low, self.band_high, self.check_every = judge, band_low, band_high, check_every
        self.checks: list[Check] = []
        self.stopped = "epochs"  # or "in_band", "past_band"

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.check_every:
            return control
        losses = [entry["loss"] for entry in state.log_history if "loss" in entry]
        passed, total = self.judge.pass_rate(model, processing_class)
        rate = passed / total if total else 0.0
        check = Check(step=state.global_step, loss=losses[-1] if losses else None, pass_rate=rate, passed=passed,
                      total=total)
        self.checks.append(check)
        print(f"sft check at step {check.step}: held-out pass@1 {passed}/{total}, loss {check.loss}",
              file=sys.stderr, flush=True)
        if rate >= self.band_low:
            self.stopped = "in_band" if rate <= self.band_high else "past_band"
            control.should_training_stop = True
        return control
