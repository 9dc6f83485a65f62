"""The event-log contract every backend implements: keyed batches in, consumer groups out; no exactly-once promise.

Delivery is at-least-once. A consumer sees each partition's records in offset order; records
with one key land in one partition, so per-key order holds. Committing stores, per partition,
the offset of the next record to read; a member that dies before committing has its records
redelivered to whichever member takes its partitions over.
"""

from __future__ import annotations

import abc
import zlib
from typing import Iterable, Sequence

import msgspec


class Record(msgspec.Struct, frozen=True):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int


class Message(msgspec.Struct, frozen=True):
    """A record to produce: the key chooses the partition."""

    topic: str
    key: bytes | None
    value: bytes


class TopicSpec(msgspec.Struct, frozen=True):
    name: str
    partitions: int = 4
    retention_ms: int = -1  # -1 keeps events forever: the log is the source of truth


TopicPartition = tuple[str, int]


class LogError(RuntimeError):
    """The log backend failed (unreachable broker, corrupt file); the message says which and why."""


def partition_for(key: bytes | None, partitions: int, fallback: int = 0) -> int:
    """Stable key -> partition mapping shared by backends that choose partitions themselves."""
    if key is None:
        return fallback % partitions
    return zlib.crc32(key) % partitions


def next_offsets(records: Iterable[Record]) -> dict[TopicPartition, int]:
    """The commit position (last offset + 1) per partition for records that were processed."""
    positions: dict[TopicPartition, int] = {}
    for r in records:
        tp = (r.topic, r.partition)
        positions[tp] = max(positions.get(tp, 0), r.offset + 1)
    return positions


class Producer(abc.ABC):
    @abc.abstractmethod
    async def send(self, messages: Sequence[Message]) -> None:
        """Append messages; returns once they are durable (acknowledged)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> "Producer":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class Consumer(abc.ABC):
    """One member of a consumer group, reading a fixed list of topics."""

    group: str

    @abc.abstractmethod
    async def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        """Up to max_records records from the member's partitions; empty after timeout_s with none."""

    @abc.abstractmethod
    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Store the next offset to read for each partition (see `next_offsets`)."""

    @abc.abstractmethod
    async def commit_with(self, messages: Sequence[Message], offsets: dict[TopicPartition, int]) -> None:
        """Produce messages and commit offsets atomically (one SQLite transaction, one Kafka transaction)."""

    @abc.abstractmethod
    async def seek_to_beginning(self) -> None:
        """Read the member's partitions again from their first record (replay); commits nothing."""

    @abc.abstractmethod
    async def position(self, tp: TopicPartition) -> int:
        """The offset the next poll reads from on `tp`, one of this member's partitions. Kafka's transaction
        markers take offsets but are no records: the position moves past them, a record's offset + 1 does not."""

    @abc.abstractmethod
    def assignment(self) -> set[TopicPartition]:
        """The partitions this member owns now (may change at any poll)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Leave the group (its partitions move to the other members at once); commits nothing."""

    async def __aenter__(self) -> "Consumer":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class EventLog(abc.ABC):
    url: str

    @abc.abstractmethod
    async def ensure_topics(self, specs: Iterable[TopicSpec]) -> None:
        """Create missing topics; existing ones are left as they are."""

    @abc.abstractmethod
    async def producer(self, name: str = "producer") -> Producer: ...

    @abc.abstractmethod
    async def consumer(self, group: str, topics: Sequence[str], *, session_timeout_s: float = 10.0) -> Consumer:
        """Join `group` reading `topics`; a group with no commit starts at each partition's beginning."""

    @abc.abstractmethod
    async def topics(self) -> dict[str, int]:
        """Existing topics and their partition counts."""

    @abc.abstractmethod
    async def end_offsets(self, topic: str) -> dict[int, int]:
        """Per partition, the offset the next appended record will get."""

    @abc.abstractmethod
    async def committed(self, group: str, topic: str) -> dict[int, int]:
        """Per partition, the group's committed next offset (0 where it never committed)."""

    @abc.abstractmethod
    async def groups(self) -> list[str]: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> "EventLog":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
