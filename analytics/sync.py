"""Feed the projection from the event log: DuckDB's stored offsets are the truth, the log's group commits only a hint.

`Projector` is a stage of the one stage host (kernelzero/stage.py) that reads every topic and
takes each polled batch of raw records whole: `Projection.apply` writes the rows and the offsets
in one DuckDB transaction, then the host commits the same offsets to the group, so normally both
agree. The Consumer interface has no `seek(offsets)`: a member starts at its group's committed
offsets. Where the group is ahead of DuckDB (the database was deleted or rebuilt), the member
seeks to the beginning when it has joined and `Projection.apply` skips what it already holds;
where the group is behind (a crash between the two commits), the few records in between are
skipped the same way. Only one projector per consumer group should run: members of one group
split the partitions. `sync_projection` runs it until the projection holds what the log held
when called; the projector service (service.py) runs it until stopped.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence

import anyio

from kernelzero.analytics.projection import ApplyStats, Projection
from kernelzero.log import Consumer, EventLog, Record, TopicPartition
from kernelzero.schemas import Event
from kernelzero.stage import ALL, run_stage


Positions = dict[TopicPartition, int]


async def _every_partition(log: EventLog, offsets_of: Callable[[str], Awaitable[dict[int, int]]]) -> Positions:
    """`offsets_of(topic)` (partition -> offset) for every topic of the log, keyed by (topic, partition)."""
    return {(topic, p): o for topic in sorted(await log.topics()) for p, o in (await offsets_of(topic)).items()}


class Projector:
    """The stage feeding one Projection from every topic of the log; `applied` adds up what it projected."""

    topics = ALL

    name = "projector"

    def __init__(self, log: EventLog, projection: Projection, *, batch_records: int):
        self.log = log
        self.projection = projection
        self.max_records = batch_records
        self.applied = ApplyStats()

    async def opened(self, consumer: Consumer) -> None:
        """Read the log again from its beginning where the group's commits are ahead of DuckDB's offsets."""
        committed = await _every_partition(self.log, lambda topic: self.log.committed(self.name, topic))
        stored = self.projection.offsets
        if any(offset > stored.get(tp, 0) for tp, offset in committed.items()):
            await consumer.seek_to_beginning()

    async def take(self, records: Sequence[Record]) -> Sequence[Event]:
        """Project a batch (rows and DuckDB offsets in one transaction); the host then commits the offsets."""
        self.applied.add(await anyio.to_thread.run_sync(self.projection.apply, records))
        return []

    def caught_up(self, ends: Positions) -> bool:
        """Whether the projection holds every partition up to `ends`."""
        stored = self.projection.offsets
        return all(stored.get(tp, 0) >= end for tp, end in ends.items() if end > 0)


async def sync_projection(log: EventLog, projection: Projection, *, batch_records: int,
                          idle_s: float = 1.0) -> ApplyStats:
    """Bring the projection up to date with the log's contents as of now: run a Projector until every partition
    reaches the end it had when called, or nothing came for `idle_s` (another member of the group holds the rest)."""
    projector = Projector(log, projection, batch_records=batch_records)
    ends = await _every_partition(log, log.end_offsets)
    await run_stage(log, projector, idle_exit_s=idle_s, until=lambda: projector.caught_up(ends))
    return projector.applied
