"""The Kafka event log (Apache Kafka 4.x through aiokafka 0.14); at-least-once, it does not fence zombie members.

Producers are idempotent (acks=all) and keep retrying through a broker restart until their
delivery deadline. Consumers are group members with manual commits, reading committed data
only. `commit_with` runs one Kafka transaction per call on a transactional producer owned by the
consumer; aiokafka commits transactional offsets without the group generation, so a member that
lost its partitions mid-batch can still commit them: duplicates are possible, loss is not.
Partitions are chosen with `partition_for`, exactly as the embedded backend does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
import uuid
from typing import Iterable, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import CommitFailedError, KafkaError, TopicAlreadyExistsError

from kernelzero.log.base import (
    Consumer, EventLog, LogError, Message, Producer, Record, TopicPartition, TopicSpec, partition_for,
)

logger = logging.getLogger("kernelzero.log.kafka")

INTERNAL_TOPIC_PREFIX = "__"
MAX_REPLICATION = 3
URL_OPTIONS = ("delivery_timeout_s", "metadata_timeout_s", "join_timeout_s")


@contextlib.contextmanager
def broker_errors(bootstrap: str, doing: str):
    """Turn client and socket errors into a LogError that names the broker and the operation."""
    try:
        yield
    except LogError:
        raise
    except (KafkaError, OSError, asyncio.TimeoutError) as exc:
        name = type(exc).__name__
        detail = str(exc) if str(exc).startswith(name) else f"{name}: {exc}"  # aiokafka errors name themselves
        raise LogError(f"Kafka broker {bootstrap}: {doing} failed: {detail}") from exc


async def partition_counts(producer: AIOKafkaProducer, topics: Iterable[str], bootstrap: str, wait_s: float) -> dict[str, int]:
    counts = {}
    for topic in set(topics):
        try:
            counts[topic] = len(await asyncio.wait_for(producer.partitions_for(topic), wait_s))
        except asyncio.TimeoutError:
            raise LogError(
                f"Kafka broker {bootstrap}: topic {topic!r} is unknown after {wait_s:.0f}s "
                "(create it with ensure_topics, or the broker is unreachable)"
            ) from None
    return counts


async def enqueue(producer: AIOKafkaProducer, messages: Sequence[Message], counts: dict[str, int]) -> list[asyncio.Future]:
    """Hand messages to the producer's buffer with the partition `partition_for` picks; returns their futures."""
    return [
        await producer.send(m.topic, m.value, key=m.key, partition=partition_for(m.key, counts[m.topic], fallback=i))
        for i, m in enumerate(messages)
    ]


def parse_url_options(url: str, query: str) -> dict[str, float]:
    options = {}
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key not in URL_OPTIONS:
            raise LogError(f"unknown option {key!r} in {url}; known: {', '.join(URL_OPTIONS)}")
        try:
            options[key] = float(value)
        except ValueError:
            raise LogError(f"option {key} in {url} must be a number of seconds, got {value!r}") from None
        if options[key] <= 0:
            raise LogError(f"option {key} in {url} must be positive, got {value!r}")
    return options


class KafkaLog(EventLog):
    def __init__(
        self,
        bootstrap: str,
        *,
        delivery_timeout_s: float = 120.0,
        metadata_timeout_s: float = 15.0,
        join_timeout_s: float = 60.0,
    ):
        """`bootstrap` is "host:port[,host:port...][?option=seconds&...]" (options: URL_OPTIONS, overriding the
        arguments). A produce call waits up to `delivery_timeout_s` for acknowledgements (riding out broker
        restarts); a new consumer waits up to `join_timeout_s` for its first assignment."""
        self.url = f"kafka://{bootstrap}"
        self.bootstrap, _, query = bootstrap.partition("?")
        options = {"delivery_timeout_s": delivery_timeout_s, "metadata_timeout_s": metadata_timeout_s,
                   "join_timeout_s": join_timeout_s}
        options.update(parse_url_options(self.url, query))
        self.delivery_timeout_s = options["delivery_timeout_s"]
        self.metadata_timeout_s = options["metadata_timeout_s"]
        self.join_timeout_s = options["join_timeout_s"]
        self._admin: AIOKafkaAdminClient | None = None
        self._offsets_reader: AIOKafkaConsumer | None = None

    def _errors(self, doing: str):
        return broker_errors(self.bootstrap, doing)

    async def admin(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self.bootstrap, request_timeout_ms=int(self.metadata_timeout_s * 1000)
            )
            with self._errors("connecting"):
                await admin.start()
            self._admin = admin
        return self._admin

    async def _describe(self) -> dict[str, int]:
        with self._errors("listing topics"):
            topics = await (await self.admin()).describe_topics()
        return {
            t["topic"]: len(t["partitions"]) for t in topics
            if not t["is_internal"] and not t["topic"].startswith(INTERNAL_TOPIC_PREFIX) and t["error_code"] == 0
        }

    async def ensure_topics(self, specs: Iterable[TopicSpec]) -> None:
        existing = await self._describe()
        missing = {s.name: s for s in specs if s.name not in existing}
        if not missing:
            return
        admin = await self.admin()
        with self._errors("creating topics"):
            brokers = len((await admin.describe_cluster())["brokers"])
            replication = min(MAX_REPLICATION, brokers)
            response = await admin.create_topics([
                NewTopic(s.name, s.partitions, replication, topic_configs={"retention.ms": str(s.retention_ms)})
                for s in missing.values()
            ])
        # topic_errors rows are (topic, error_code, error_message); a concurrent creator is not a failure.
        failures = [
            f"{row[0]}: {row[2] or row[1]}" for row in response.topic_errors
            if row[1] not in (0, TopicAlreadyExistsError.errno)
        ]
        if failures:
            raise LogError(f"Kafka broker {self.bootstrap}: could not create topics: {'; '.join(failures)}")
        await self._until_visible({name: spec.partitions for name, spec in missing.items()})

    async def _until_visible(self, partitions: dict[str, int]) -> None:
        """Wait until the metadata shows every new topic with its partitions: a consumer right after must find them."""
        deadline = time.monotonic() + self.metadata_timeout_s
        while True:
            known = await self._describe()
            pending = sorted(t for t, n in partitions.items() if known.get(t, 0) < n)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise LogError(f"Kafka broker {self.bootstrap}: created topics {pending} are not visible after "
                               f"{self.metadata_timeout_s:g}s")
            await asyncio.sleep(0.1)

    async def producer(self, name: str = "producer") -> Producer:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            client_id=name,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            max_batch_size=256 * 1024,
            retry_backoff_ms=250,
            # aiokafka expires an unsent batch after request_timeout_ms (only while its partition has
            # no known leader); making that the delivery deadline lets a batch ride out a restart.
            request_timeout_ms=int(self.delivery_timeout_s * 1000),
        )
        with self._errors(f"starting producer {name!r}"):
            await producer.start()
        return KafkaProducer(self, producer)

    async def consumer(self, group: str, topics: Sequence[str], *, session_timeout_s: float = 10.0) -> Consumer:
        known = await self._describe()
        missing = [t for t in topics if t not in known]
        if missing:
            raise LogError(f"cannot consume missing topics {missing} from {self.url}")
        member = KafkaConsumer(self, group, list(topics), session_timeout_s)
        await member.join()
        return member

    async def topics(self) -> dict[str, int]:
        return await self._describe()

    async def end_offsets(self, topic: str) -> dict[int, int]:
        partitions = (await self._describe()).get(topic, 0)
        if not partitions:
            return {}
        if self._offsets_reader is None:
            reader = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
            with self._errors("connecting"):
                await reader.start()
            self._offsets_reader = reader
        with self._errors(f"reading end offsets of {topic!r}"):
            ends = await self._offsets_reader.end_offsets([KafkaTP(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in ends.items()}

    async def committed_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed next offsets for `partitions` (0 where it never committed).

        Retriable errors (the group's coordinator moving or still loading, as just after a broker
        restart) are retried until `metadata_timeout_s`; others raise at once.
        """
        wanted = [KafkaTP(t, p) for t, p in partitions]
        if not wanted:
            return {}
        deadline = time.monotonic() + self.metadata_timeout_s
        while True:
            try:
                with self._errors(f"reading offsets of group {group!r}"):
                    stored = await (await self.admin()).list_consumer_group_offsets(group, partitions=wanted)
                break
            except LogError as exc:
                if not getattr(exc.__cause__, "retriable", False) or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        return {(tp.topic, tp.partition): max(0, stored[tp].offset) if tp in stored else 0 for tp in wanted}

    async def committed(self, group: str, topic: str) -> dict[int, int]:
        partitions = (await self._describe()).get(topic, 0)
        offsets = await self.committed_offsets(group, [(topic, p) for p in range(partitions)])
        return {p: o for (_, p), o in offsets.items()}

    async def groups(self) -> list[str]:
        with self._errors("listing consumer groups"):
            listed = await (await self.admin()).list_consumer_groups()
        return sorted({g[0] for g in listed})

    async def close(self) -> None:
        if self._offsets_reader is not None:
            await self._offsets_reader.stop()
            self._offsets_reader = None
        if self._admin is not None:
            await self._admin.close()
            self._admin = None


class KafkaProducer(Producer):
    def __init__(self, log: KafkaLog, producer: AIOKafkaProducer):
        self._log = log
        self._producer = producer

    async def send(self, messages: Sequence[Message]) -> None:
        if not messages:
            return
        bootstrap, deadline_s = self._log.bootstrap, self._log.delivery_timeout_s
        counts = await partition_counts(self._producer, (m.topic for m in messages), bootstrap, self._log.metadata_timeout_s)
        with broker_errors(bootstrap, f"sending {len(messages)} events"):
            futures = await enqueue(self._producer, messages, counts)
            # asyncio.wait, not wait_for(gather): cancelling aiokafka's delivery futures is unsafe.
            done, pending = await asyncio.wait(futures, timeout=deadline_s)
        if pending:
            raise LogError(
                f"Kafka broker {bootstrap}: {len(pending)} of {len(messages)} events not acknowledged "
                f"within {deadline_s:.0f}s (the producer keeps retrying them in the background)"
            )
        failed = [f.exception() for f in done if f.exception() is not None]
        if failed:
            raise LogError(
                f"Kafka broker {bootstrap}: {len(failed)} of {len(messages)} events failed: "
                f"{type(failed[0]).__name__}: {failed[0]}"
            ) from failed[0]

    async def close(self) -> None:
        await self._producer.stop()


class _AssignmentSignal(ConsumerRebalanceListener):
    """Sets an event once the member has completed a join (possibly with no partitions)."""

    def __init__(self) -> None:
        self.assigned = asyncio.Event()

    async def on_partitions_revoked(self, revoked) -> None:
        return None

    async def on_partitions_assigned(self, assigned) -> None:
        self.assigned.set()


class KafkaConsumer(Consumer):
    def __init__(self, log: KafkaLog, group: str, topics: list[str], session_timeout_s: float):
        self.group = group
        self.member = uuid.uuid4().hex
        self._log = log
        self._topics = topics
        session_ms = int(session_timeout_s * 1000)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=log.bootstrap,
            group_id=group,
            client_id=f"{group}-{self.member[:8]}",
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(100, session_ms // 3),
            # Heartbeats run in the background; this bounds the time between polls, which a batch of
            # GPU evaluations or a group of generations can take: 30 minutes before eviction.
            max_poll_interval_ms=1_800_000,
        )
        self._signal = _AssignmentSignal()
        self._transactional: AIOKafkaProducer | None = None

    def _errors(self, doing: str):
        return broker_errors(self._log.bootstrap, f"{doing} (group {self.group!r})")

    async def join(self) -> None:
        """Start, subscribe, and wait for the first assignment, so the first poll can return records."""
        with self._errors("joining"):
            await self._consumer.start()
            self._consumer.subscribe(topics=self._topics, listener=self._signal)
        try:
            await asyncio.wait_for(self._signal.assigned.wait(), self._log.join_timeout_s)
        except asyncio.TimeoutError:
            await self._consumer.stop()
            raise LogError(
                f"Kafka broker {self._log.bootstrap}: no partition assignment for group {self.group!r} "
                f"within {self._log.join_timeout_s:.0f}s"
            ) from None

    async def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        with self._errors("polling"):
            batches = await self._consumer.getmany(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        return [
            Record(tp.topic, tp.partition, r.offset, r.key, r.value, r.timestamp)
            for tp, records in batches.items() for r in records
        ]

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        owned = self.assignment()
        mine = {KafkaTP(t, p): o for (t, p), o in offsets.items() if (t, p) in owned}
        if len(mine) < len(offsets):
            # Kafka refuses commits for partitions another member owns now; it will redeliver them.
            logger.warning("%s: not committing %d partitions it no longer owns", self.group, len(offsets) - len(mine))
        if not mine:
            return
        try:
            with self._errors("committing offsets"):
                await self._consumer.commit(mine)
        except LogError as exc:
            if not isinstance(exc.__cause__, CommitFailedError):
                raise
            logger.warning("%s: commit dropped by a rebalance; its records will be redelivered", self.group)

    async def _transactional_producer(self) -> AIOKafkaProducer:
        if self._transactional is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self._log.bootstrap,
                client_id=f"{self.group}-{self.member[:8]}-txn",
                transactional_id=f"{self.group}-{self.member}",
                linger_ms=2,
                max_batch_size=256 * 1024,
                retry_backoff_ms=250,
                request_timeout_ms=int(self._log.delivery_timeout_s * 1000),
            )
            with self._errors("starting the transactional producer"):
                await producer.start()
            self._transactional = producer
        return self._transactional

    async def commit_with(self, messages: Sequence[Message], offsets: dict[TopicPartition, int]) -> None:
        if not messages:
            await self.commit(offsets)
            return
        producer = await self._transactional_producer()
        counts = await partition_counts(
            producer, (m.topic for m in messages), self._log.bootstrap, self._log.metadata_timeout_s
        )
        with self._errors(f"transaction of {len(messages)} events"):
            await producer.begin_transaction()
            try:
                await enqueue(producer, messages, counts)
                if offsets:
                    await producer.send_offsets_to_transaction(
                        {KafkaTP(t, p): o for (t, p), o in offsets.items()}, self.group
                    )
                await producer.commit_transaction()
            except BaseException:
                with contextlib.suppress(KafkaError):
                    await asyncio.shield(producer.abort_transaction())
                raise
        await self._until_visible(offsets)

    async def _until_visible(self, offsets: dict[TopicPartition, int]) -> None:
        """Wait until the coordinator shows the transaction's offsets: it writes them just after the commit
        returns, and `committed` (and a member that joins next) should read what this call committed."""
        deadline = time.monotonic() + self._log.metadata_timeout_s
        while offsets and time.monotonic() < deadline:
            stored = await self._log.committed_offsets(self.group, offsets)
            if all(stored[tp] >= o for tp, o in offsets.items()):
                return
            await asyncio.sleep(0.01)
        if offsets:
            logger.warning("%s: committed offsets not visible after %.0fs", self.group, self._log.metadata_timeout_s)

    async def seek_to_beginning(self) -> None:
        owned = self._consumer.assignment()
        if owned:
            with self._errors("seeking to the beginning"):
                await self._consumer.seek_to_beginning(*owned)

    async def position(self, tp: TopicPartition) -> int:
        with self._errors("reading its position"):
            return await self._consumer.position(KafkaTP(*tp))

    def assignment(self) -> set[TopicPartition]:
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    async def close(self) -> None:
        with self._errors("leaving"):
            await self._consumer.stop()
            if self._transactional is not None:
                await self._transactional.stop()
                self._transactional = None

