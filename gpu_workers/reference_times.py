"""The reference's times per (problem, GPU, evaluator version, settings): one reference-only job shared by every evaluation waiting for them, kept signed on disk; it does NOT notice a GPU whose clocks changed since they were measured.

A group of G samples of one module is judged against one timing of its reference instead of G
interleaved ones (issue 27). The job that measures them runs no candidate code (trial.py), so no
candidate can write what other candidates are compared against; the file is signed like the
result cache (signed_cache.py). A failure is answered to every evaluation waiting for it and is not
kept: the next evaluation of the problem asks again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Awaitable, Callable

import msgspec

from kernelzero.gpu_workers.signed_cache import SignedFiles
from kernelzero.schemas import Evaluation
from kernelzero.schemas.messages import ReferenceTiming

Measure = Callable[[], Awaitable["ReferenceTiming | Evaluation"]]  # the reference-only job: its times, or its failure


class ReferenceTimes:
    def __init__(self, cache_dir: Path, signed: SignedFiles, *, use_disk: bool = True):
        self.folder = cache_dir / "references"
        self.signed = signed
        self.use_disk = use_disk
        self._pending: dict[str, asyncio.Future] = {}

    async def get(self, key: str, measure: Measure) -> ReferenceTiming | Evaluation:
        """The times under `key` (a file name: the pool's hash of whose times they are): kept on disk, being measured for another evaluation, or measured now by `measure`."""
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = asyncio.ensure_future(self._load_or_measure(key, measure))
        try:
            outcome = await asyncio.shield(pending)  # one waiter cancelled does not cancel the others' job
        except Exception:
            self._forget(key, pending)
            raise
        if isinstance(outcome, Evaluation):
            self._forget(key, pending)
        return outcome

    def _forget(self, key: str, pending: asyncio.Future) -> None:
        if self._pending.get(key) is pending:
            del self._pending[key]

    async def _load_or_measure(self, key: str, measure: Measure) -> ReferenceTiming | Evaluation:
        path = self.folder / f"{key}.json"
        payload = self.signed.read(path) if self.use_disk else None
        if payload is not None:
            try:
                return msgspec.json.decode(payload, type=ReferenceTiming)
            except msgspec.DecodeError:
                pass
        outcome = await measure()
        if isinstance(outcome, ReferenceTiming) and self.use_disk:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.signed.write(path, msgspec.json.encode(outcome))
        return outcome
