"""The loop every stage runs: poll, decode, handle, then produce outputs and commit offsets atomically.

At-least-once: a batch's outputs and its offsets commit together, so a stage that dies mid-batch
redoes the whole batch (handlers must be idempotent on event_id, or tolerate duplicates
downstream, which consumers deduplicate). Events of unknown types are skipped and counted;
undecodable bytes and handler exceptions go to the dead-letter topic with the reason, and the
loop carries on. A stage that `take`s whole batches of raw records decodes them itself: the host
skips and dead-letters nothing for it, and its exceptions stop it. It does not bound how long a
handler may take: long work belongs in a worker process the handler awaits.
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import AsyncContextManager, Callable, Protocol, Sequence

import anyio
import msgspec

from kernelzero.config import LogConfig
from kernelzero.log import EventLog, Message, Record, next_offsets
from kernelzero.schemas import DeadLetter, DecodeError, Event, UnknownEventType, decode, encode, make_event

logger = logging.getLogger("kernelzero.stage")


ALL: tuple[str, ...] = ("*",)  # a stage's `topics` for every topic of the log, as listed when it starts
# The pipeline's stages in pipeline order, as `kernelzero serve ROLE` and `kernelzero run --roles` name them. One
# naming rule, fixed, not configured: a stage's consumer group, and the producer named in its dead letters and
# events, is its role's name.
ROLES: tuple[str, ...] = ("proposer", "validator", "coder", "evaluator", "trainer", "projector")


class Stage(Protocol):
    """A consuming stage. It takes its records one of two ways:

    - `async def handle(event) -> Sequence[Event]`: one decoded event at a time (the host decodes,
      skips unknown types and dead-letters what fails);
    - `async def take(records) -> Sequence[Event]`: each polled batch of raw `Record`s at once;
    - `async def handle_many(events) -> list[Sequence[Event]]` beside `handle`: a poll's decoded events at once,
      the outputs of each in order (the Coder samples its modules in one generation); where it raises, the host
      discards what it returned and handles the events one at a time, so only the event that fails is
      dead-lettered.

    Optional: `max_records` taken per poll (default 64); `concurrency` events handled at once
    (default 1, `handle` only); `async def opened(consumer)`, called once its consumer has joined,
    before the first poll, to restore its position (`seek_to_beginning`); `async def at_head() ->
    Sequence[Event]`, called after every poll that came back short of `max_records` (the stage has
    caught up with the log), whose events commit with that poll's outputs and offsets (a stage that
    produces without being asked, as the Proposer does, produces there); `def done() -> bool`, asked
    before each poll: the stage has finished its work and the host stops it.
    """

    name: str  # its role (ROLES): the consumer group, and the producer named in dead letters
    topics: Sequence[str]  # or ALL


class StageStats(msgspec.Struct):
    consumed: int = 0
    produced: int = 0
    skipped_unknown: int = 0
    dead_lettered: int = 0


def message_for(event: Event) -> Message:
    """Events live on the topic named by their type, keyed by correlation id (the module)."""
    return Message(topic=event.type, key=event.envelope.correlation_id.encode(), value=encode(event))


def dead_letter(record: Record, reason: str, error: str, producer: str) -> Event:
    payload = DeadLetter(
        topic=record.topic, partition=record.partition, offset=record.offset, reason=reason,
        error=error[-4000:], key=record.key, value=record.value, group=producer,
    )
    correlation = record.key.decode(errors="replace") if record.key else f"{record.topic}/{record.partition}"
    return make_event(payload, correlation_id=correlation, producer=producer)


async def read_payloads(log: EventLog, topic: str, kind: type, *, reader: str) -> list:
    """Every `kind` payload on `topic` as of now, oldest first, for a stage restoring its state when it starts;
    undecodable records are skipped here (the stage consuming the topic dead-letters them)."""
    from kernelzero.log import read_to_end

    found = []
    async for record in read_to_end(log, topic, reader=reader):
        try:
            payload = decode(record.value).payload
        except DecodeError:
            continue
        if isinstance(payload, kind):
            found.append(payload)
    return found


async def publish(log: EventLog, events: Sequence[Event], producer_name: str = "publisher") -> None:
    """Append events (for stages that produce without consuming); durable when it returns."""
    if events:
        async with await log.producer(producer_name) as producer:
            await producer.send([message_for(e) for e in events])


def publish_to(log_url: str, events: Sequence[Event], producer_name: str = "publisher") -> None:
    """Open the log at `log_url`, append `events`, close it (for commands that publish once and exit)."""
    from kernelzero.log import open_log

    async def run() -> None:
        async with await open_log(log_url) as log:
            await publish(log, events, producer_name)

    anyio.run(run)


def _decoded(stage: Stage, record: Record, stats: StageStats) -> Event | list[Event]:
    """The record's event, or what replaces its handling: nothing for an unknown type, a dead letter for bytes
    that do not decode."""
    try:
        return decode(record.value)
    except UnknownEventType as exc:
        stats.skipped_unknown += 1
        logger.info("%s skips %s/%d@%d: %s", stage.name, record.topic, record.partition, record.offset, exc)
        return []
    except DecodeError as exc:
        stats.dead_lettered += 1
        return [dead_letter(record, "undecodable", str(exc), stage.name)]


async def _handle_record(stage: Stage, record: Record, stats: StageStats) -> list[Event]:
    event = _decoded(stage, record, stats)
    return event if isinstance(event, list) else await _handle_event(stage, record, event, stats)


async def _handle_event(stage: Stage, record: Record, event: Event, stats: StageStats) -> list[Event]:
    try:
        return list(await stage.handle(event))
    except Exception:  # one bad event must not stop the stage: it is parked with its traceback
        stats.dead_lettered += 1
        logger.exception("%s failed on %s", stage.name, event.event_id)
        return [dead_letter(record, "handler_error", traceback.format_exc(), stage.name)]


async def _handle_together(stage: Stage, records: list[Record], stats: StageStats) -> list[Event]:
    """`stage.handle_many` on the batch's decodable events; each alone (`handle`) where it raises."""
    decoded = [_decoded(stage, record, stats) for record in records]
    events = [e for e in decoded if not isinstance(e, list)]
    try:
        answered = await stage.handle_many(events) if events else []
        if len(answered) != len(events):
            raise ValueError(f"{stage.name}.handle_many answered {len(answered)} of {len(events)} events")
        outputs = iter(answered)
    except Exception:  # noqa: BLE001  (one event of the batch may be bad: find it alone)
        logger.info("%s: a batch of %d events failed; handling them one at a time", stage.name, len(events))
        outputs = iter([await _handle_event(stage, r, e, stats) for r, e in zip(records, decoded)
                        if not isinstance(e, list)])
    return [out for e in decoded for out in (e if isinstance(e, list) else next(outputs))]


async def _handle_batch(stage: Stage, records: list[Record], stats: StageStats, concurrency: int) -> list[Event]:
    results: list[list[Event]] = [[] for _ in records]
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(index: int, record: Record) -> None:
        async with limiter:
            results[index] = await _handle_record(stage, record, stats)

    async with anyio.create_task_group() as group:
        for index, record in enumerate(records):
            group.start_soon(one, index, record)
    return [event for events in results for event in events]


async def run_stage(
    log: EventLog,
    stage: Stage,
    *,
    idle_exit_s: float | None = None,
    max_records: int | None = None,
    session_timeout_s: float = 10.0,
    concurrency: int | None = None,
    until: Callable[[], bool] | None = None,
) -> StageStats:
    """Run until cancelled, until nothing was consumed or produced for `idle_exit_s` seconds, or until `until()`
    (else the stage's own `done()`) holds, asked before each poll.

    `max_records` and `concurrency` default to the stage's own (or 64 and 1). `concurrency` > 1
    handles up to that many records of a batch at once (an evaluator with several workers);
    outputs keep record order, but the handler must not rely on seeing one key's events in order.
    """
    stats = StageStats()
    max_records = max_records or getattr(stage, "max_records", 64)
    concurrency = concurrency or getattr(stage, "concurrency", 1)
    topics = sorted(await log.topics()) if tuple(stage.topics) == ALL else list(stage.topics)
    take, handle_many = getattr(stage, "take", None), getattr(stage, "handle_many", None)
    at_head = getattr(stage, "at_head", None)
    until = until or getattr(stage, "done", None)
    async with await log.consumer(stage.name, topics, session_timeout_s=session_timeout_s) as consumer:
        if (opened := getattr(stage, "opened", None)) is not None:
            await opened(consumer)
        idle_since = time.monotonic()
        while until is None or not until():
            records = await consumer.poll(max_records=max_records, timeout_s=0.5)
            outputs: list[Event] = []
            if records:
                if take:
                    outputs = list(await take(records))
                elif handle_many:
                    outputs = await _handle_together(stage, records, stats)
                else:
                    outputs = await _handle_batch(stage, records, stats, concurrency)
            if at_head is not None and len(records) < max_records:
                outputs += await at_head()
            if records or outputs:
                with anyio.CancelScope(shield=True):  # never leave a batch half-committed
                    await consumer.commit_with([message_for(e) for e in outputs], next_offsets(records))
                stats.consumed += len(records)
                stats.produced += len(outputs)
            if records or outputs:
                idle_since = time.monotonic()
            elif idle_exit_s is not None and time.monotonic() - idle_since >= idle_exit_s:
                if await drained(log, consumer, stage.name, topics):
                    break
                # input waits in partitions another member holds: a process that died keeps them until its
                # session times out (a demo continued right after it was killed)
                idle_since = time.monotonic()
    return stats


async def drained(log: EventLog, consumer, group: str, topics: Sequence[str]) -> bool:
    """Whether every record of `topics` as of now is behind `consumer` in the partitions it holds (its position:
    on Kafka past a transaction's closing marker, which takes an offset of its own) or committed by its group
    in the others."""
    held = consumer.assignment()
    for topic in topics:
        committed = await log.committed(group, topic)
        for partition, end in (await log.end_offsets(topic)).items():
            if committed.get(partition, 0) >= end:
                continue
            if (topic, partition) not in held or await consumer.position((topic, partition)) < end:
                return False
    return True


async def host_stage(log_config: LogConfig, open_stage: Callable[[EventLog], AsyncContextManager[Stage]], *,
                     idle_exit_s: float | None = None) -> StageStats:
    """The one host of every consuming stage: open the log ([log]), let `open_stage(log)` build the stage (restoring
    its state from the log, starting its workers), run it until idle or cancelled, then close the stage and the log."""
    from kernelzero.log import open_log

    async with await open_log(log_config.url) as log:
        async with open_stage(log) as stage:
            return await run_stage(log, stage, idle_exit_s=idle_exit_s, session_timeout_s=log_config.session_timeout_s)

