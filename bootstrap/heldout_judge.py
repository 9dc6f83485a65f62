"""Held-out rows (kernelzero distill's *_heldout.jsonl) and their judge for the SFT stopping rule: one sample per row from the model in training, judged by the real evaluator (Coder) or validator (Proposer); no timing, pass or fail only."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import msgspec

from kernelzero.kit.codeblocks import last_python_block


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
        from kernelzero.kit.heldout_protocol import sampling_seed
        from kernelzero.producers.backend_transformers import TransformersGenerator

        section = getattr(self.config, self.role)
        model.eval()
        try:
            generator = TransformersGenerator(loaded=(model, tokenizer), seed=self.config.coder.seed)
            answers = generator.generate_sync([r.prompt for r in self.rows], 1, temperature=section.temperature,
                                              top_p=1.0, max_tokens=self.max_tokens,
                                              seeds=[sampling_seed(r.prompt) for r in self.rows])
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
            if source is None:
                return False
            return (await self._pool.evaluate(row.reference, source, timed=False)).verdict == "correct"

        return list(await asyncio.gather(*(judge(row, source) for row, source in zip(self.rows, sources))))

    def _proposer(self, texts: list[str]) -> list[bool]:
        from kernelzero.consumers.validator import validate, validator_sandbox
        from kernelzero.producers.proposer import last_model_block

        sandbox = validator_sandbox(self.config.evaluator, self.config.validator.device)
        try:
            return [validate(last_model_block(text), row.apis, self.config.validator, sandbox=sandbox).ok
                    for row, text in zip(self.rows, texts)]
        finally:
            sandbox.close()

    def close(self) -> None:
        if self._pool is not None:
            self._loop.run_until_complete(self._pool.__aexit__(None, None, None))
        self._loop.close()
