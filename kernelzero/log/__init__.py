"""Open an event log by URL (`embedded:PATH` or `kafka://HOST:PORT`) and the topic layout of DESIGN.md."""

from __future__ import annotations

from kernelzero.log.base import (
    Consumer, EventLog, LogError, Message, Producer, Record, TopicPartition, TopicSpec, next_offsets,
    partition_for,
)
from kernelzero.log.read import read_to_end
from kernelzero.schemas import TOPICS

# Work topics are over-partitioned so that GPU workers and coders scale with partitions.
WORK_TOPICS = {"modules.accepted": 16, "samples.generated": 16}
TOPIC_SPECS: tuple[TopicSpec, ...] = tuple(
    TopicSpec(name=t, partitions=WORK_TOPICS.get(t, 1 if t == "deadletter" else 4)) for t in TOPICS
)


async def open_log(url: str, *, create: bool = True) -> EventLog:
    """Connect to the log at `url` and make sure every KernelZero topic exists; with create=False
    (readers) an embedded log that is not there is a LogError naming its path, and no topic is created."""
    if url.startswith("embedded:"):
        from kernelzero.log.embedded import EmbeddedLog

        log: EventLog = EmbeddedLog(url.removeprefix("embedded:"), create=create)
    elif url.startswith("kafka://"):
        from kernelzero.log.kafka import KafkaLog

        log = KafkaLog(url.removeprefix("kafka://"))
    else:
        raise LogError(f"unknown broker URL {url!r}: use embedded:PATH or kafka://HOST:PORT")
    if create:
        await log.ensure_topics(TOPIC_SPECS)
    return log


__all__ = [
    "Consumer", "EventLog", "LogError", "Message", "Producer", "Record", "TopicPartition", "TopicSpec",
    "TOPIC_SPECS", "next_offsets", "open_log", "partition_for", "read_to_end",
]
