"""Stages a run of rounds keeps open between its rounds (the evaluator's contained workers, the validator's sandbox), on an event loop of their own; every other role starts afresh each time, and nothing outlives the `with`.

A stage run here ends as `serve_until_idle`'s does (its input drained, one empty poll of quiet) but
keeps its workers for the next run: a round of the GPU demo spent two thirds of its minute starting
them (docs/BENCHMARKS.md). A stage kept open is what `kernelzero run` keeps open for its whole run,
so it holds nothing a long-running stage would not. The log is opened once per kept stage.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future
from contextlib import ExitStack
from typing import Any

import anyio
from anyio.from_thread import start_blocking_portal

from kernelzero.app.serve import serve_until_idle
from kernelzero.config import Config


def _openers(config: Config) -> dict[str, Any]:
    from kernelzero.consumers.validator import validator_stage
    from kernelzero.gpu_workers.service import evaluator_stage

    return {"evaluator": evaluator_stage(config), "validator": validator_stage(config)}


class WarmStages:
    """`run(role)`: one stage until its input is drained; the evaluator and validator opened at their first run (or
    from `open_soon`) and closed together when the `with` ends."""

    KEPT = ("evaluator", "validator")

    def __init__(self, config: Config, idle_s: float = 0.5) -> None:
        self.config, self.idle_s = copy.deepcopy(config), idle_s  # as a `kernelzero serve` reading the same file would
        self._opened: dict[str, Future] = {}  # role -> its (log, stage) once open
        self._exits = ExitStack()
        self._portal = None
        self._stop: anyio.Event | None = None

    def __enter__(self) -> "WarmStages":
        self._portal = self._exits.enter_context(start_blocking_portal())
        self._stop = self._portal.call(anyio.Event)
        return self

    def __exit__(self, *exc) -> None:
        if self._stop is not None:
            self._portal.call(self._stop.set)
        self._exits.close()  # waits for every kept stage to close, then stops the loop

    def open_soon(self, role: str) -> None:
        """Start opening a kept stage in the background, so that its start overlaps other work; a stage opened twice
        is opened once. It sees the log as it is when it opens (the validator's duplicates)."""
        if role in self._opened:
            return
        opened: Future = Future()
        kept = self._portal.start_task_soon(self._keep, role, opened, name=f"kept {role}")
        self._exits.callback(kept.result)  # a stage that failed to open or close says so when the `with` ends
        self._opened[role] = opened

    def run(self, role: str) -> int:
        if role not in self.KEPT:
            return serve_until_idle(role, self.config, self.idle_s)
        from kernelzero.stage import run_stage

        self.open_soon(role)
        log, stage = self._opened[role].result()
        running = self._portal.start_task_soon(lambda: run_stage(log, stage, idle_exit_s=self.idle_s,
                                                                 session_timeout_s=self.config.log.session_timeout_s))
        try:
            running.result()
        except BaseException:
            running.cancel()  # an interrupted run ends before the `with` closes the stage under it
            raise
        return 0

    async def _keep(self, role: str, opened: Future) -> None:
        """Open the log and `role`'s stage in one task, which closes them too (anyio's scopes end where they began)."""
        from kernelzero.log import open_log

        try:
            async with await open_log(self.config.log.url) as log, _openers(self.config)[role](log) as stage:
                opened.set_result((log, stage))
                await self._stop.wait()
        except BaseException as exc:
            if not opened.done():  # `run` waiting on it raises this instead of waiting forever
                opened.set_exception(exc)
            raise
