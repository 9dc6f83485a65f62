"""Hand-built events and records for the analytics tests: every value is chosen by the test, nothing is random."""

from __future__ import annotations

from typing import Sequence

import anyio

from kernelzero.log import Record, open_log
from kernelzero.schemas import (
    Event, ModuleAccepted, SampleEvaluated, SampleGenerated, encode, make_event,
)


def records(events: Sequence[Event], *, start: int = 0, partition: int = 0) -> list[Record]:
    """Events as consecutive records of one partition of their own topic."""
    offsets: dict[str, int] = {}
    out = []
    for event in events:
        offset = offsets.get(event.type, start)
        out.append(Record(event.type, partition, offset, event.envelope.correlation_id.encode(), encode(event), 0))
        offsets[event.type] = offset + 1
    return out


def module(module_id: str, apis: list[str], source: str | None = None) -> Event:
    return make_event(ModuleAccepted(module_id=module_id, source=source or f"# module {module_id}", apis=apis,
                                     fingerprint=f"fp-{module_id}"), correlation_id=module_id, producer="validator")


def sample(sample_id: str, module_id: str, *, backend: str = "triton", policy_version: int = 1,
           apis: Sequence[str] = (), turn: int = 0) -> Event:
    return make_event(SampleGenerated(sample_id=sample_id, module_id=module_id, backend=backend,
                                      source=f"# kernel {sample_id}", problem_source="", apis=list(apis), turn=turn),
                      correlation_id=module_id, producer="coder", policy_version=policy_version)


def evaluation(sample_id: str, module_id: str, apis: Sequence[str], verdict: str = "correct", *,
               speedup: float | None = None, backend: str = "triton", policy_version: int | None = 1,
               reason: str = "", evidence: dict[str, str] | None = None, rel_err: float | None = None,
               turn: int = 0) -> Event:
    payload = SampleEvaluated(sample_id=sample_id, module_id=module_id, backend=backend, verdict=verdict,
                              reason=reason or verdict, apis=list(apis), speedup=speedup, rel_err=rel_err,
                              evidence=evidence or {}, turn=turn)
    return make_event(payload, correlation_id=module_id, producer="evaluator", policy_version=policy_version)


def publish_events(url: str, events: Sequence[Event]) -> None:
    """Append events to the log at `url` through the real producer."""
    from kernelzero.stage import publish

    async def run() -> None:
        log = await open_log(url)
        try:
            await publish(log, events)
        finally:
            await log.close()

    anyio.run(run)
