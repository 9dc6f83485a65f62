"""Read a topic from its beginning to the end it had when asked, as a throwaway consumer group that never commits; records produced meanwhile are left out, and a log that stops answering ends the read early (incomplete, not an error)."""

from __future__ import annotations

import time
import uuid
from typing import AsyncIterator

from kernelzero.log.base import EventLog, Record


async def read_to_end(log: EventLog, topic: str, *, reader: str = "reader", deadline_s: float = 30.0,
                      batch: int = 500, ends: dict[int, int] | None = None) -> AsyncIterator[Record]:
    """Every record of `topic` below its current end offsets (or `ends`, read earlier by the caller), partition
    by partition in offset order.

    `reader` names the throwaway group (`{reader}.{random}`) so that `kernelzero log stats` says who read.
    """
    ends = {p: end for p, end in (ends if ends is not None else await log.end_offsets(topic)).items() if end > 0}
    if not ends:
        return
    done = {p: 0 for p in ends}
    stop_at = time.monotonic() + deadline_s
    async with await log.consumer(f"{reader}.{uuid.uuid4().hex[:12]}", [topic]) as consumer:
        await consumer.seek_to_beginning()
        while any(done[p] < end for p, end in ends.items()) and time.monotonic() < stop_at:
            # empty polls are normal while a Kafka group forms: only the deadline ends the wait
            for record in await consumer.poll(max_records=batch, timeout_s=0.5):
                if record.offset < ends.get(record.partition, 0):
                    yield record
            # positions, not the records' offsets: a partition that ends in a Kafka transaction marker ends there
            for _, p in consumer.assignment() & {(topic, p) for p in ends}:
                done[p] = max(done[p], await consumer.position((topic, p)))
