"""Feed the projection from the event log: DuckDB's stored offsets are the truth, the log's group commits only a hint.

The Consumer interface has no `seek(offsets)`: a member starts at its group's committed
offsets. After each DuckDB commit the same offsets are committed to the group, so normally
both agree. Where the group is ahead of DuckDB (the database was deleted or rebuilt), the
member seeks to the beginning and `Projection.apply` skips what it already holds; where the
group is behind (a crash between the two commits), the few records in between are skipped
the same way. Only one projector per consumer group should run: members of one group split
the partitions.
"""

from __future__ import annotations

import time

import anyio

from kernelzero.analytics.projection import ApplyStats, Projection
from kernelzero.log import Consumer, EventLog, TopicPartition, next_offsets


Positions = dict[TopicPartition, int]


async def _log_positions(log: EventLog, group: str, topics: list[str]) -> tuple[Positions, Positions]:
    """The group's committed offsets and the end offsets, per partition of `topics`."""
    committed: Positions = {}
    ends: Positions = {}
    for topic in topics:
        committed.update({(topic, p): o for p, o in (await log.committed(group, topic)).items()})
        ends.update({(topic, p): o for p, o in (await log.end_offsets(topic)).items()})
    return committed, ends


class Projector:
    """A consumer of every topic of the log feeding one Projection; use `async with`."""

    def __init__(self, log: EventLog, projection: Projection, *, group: str = "analytics", batch_records: int = 5000):
        self.log = log
        self.projection = projection
        self.group = group
        self.batch_records = batch_records
        self.consumer: Consumer | None = None

    async def __aenter__(self) -> "Projector":
        topics = sorted(await self.log.topics())
        committed, _ = await _log_positions(self.log, self.group, topics)
        stored = self.projection.offsets
        self.consumer = await self.log.consumer(self.group, topics)
        if any(offset > stored.get(tp, 0) for tp, offset in committed.items()):
            await self.consumer.seek_to_beginning()
        return self

    async def __aexit__(self, *exc) -> None:
        if self.consumer is not None:
            await self.consumer.close()

    async def step(self, timeout_s: float = 0.2) -> ApplyStats:
        """Poll once and project what arrived (empty stats when nothing did within timeout_s)."""
        assert self.consumer is not None, "use `async with Projector(...)`"
        records = await self.consumer.poll(max_records=self.batch_records, timeout_s=timeout_s)
        if not records:
            return ApplyStats()
        stats = await anyio.to_thread.run_sync(self.projection.apply, records)
        await self.consumer.commit(next_offsets(records))
        return stats

    async def catch_up(self, *, idle_s: float = 1.0) -> ApplyStats:
        """Project until every partition reaches the end it had when called, or nothing came for idle_s."""
        _, ends = await _log_positions(self.log, self.group, sorted(await self.log.topics()))
        total = ApplyStats()
        last_progress = time.monotonic()
        while not self._reached(ends):
            stats = await self.step()
            total.add(stats)
            if stats.records:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > idle_s:
                break  # another member of the group holds the rest
        return total

    def _reached(self, ends: Positions) -> bool:
        stored = self.projection.offsets
        return all(stored.get(tp, 0) >= end for tp, end in ends.items() if end > 0)


async def sync_projection(log: EventLog, projection: Projection, *, group: str = "analytics",
                          batch_records: int = 5000) -> ApplyStats:
    """Bring the projection up to date with the log's contents as of now."""
    async with Projector(log, projection, group=group, batch_records=batch_records) as projector:
        return await projector.catch_up()
