"""The event-log contract on a real local Kafka broker, plus what only Kafka has (restarts, topic configs, placement)."""

from __future__ import annotations

import time

import anyio
import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from kernelzero.log import LogError, Message, TopicSpec, next_offsets, open_log, partition_for
from kernelzero.log.kafka import KafkaLog
from tests.log.conftest import kafka_script
from tests.log.contract import EventLogContract, drain, rejected, unique

pytestmark = pytest.mark.kafka


class TestKafkaLog(EventLogContract):
    session_timeout_s = 3.0

    @pytest.fixture
    def log_url(self, kafka_broker):
        return f"kafka://{kafka_broker}"


@pytest.mark.anyio
async def test_a_producer_keeps_its_events_through_a_broker_restart(kafka_broker):
    """Stop the broker while a producer sends; every event sent lands exactly once after the restart."""
    topic = unique("restart")
    log = KafkaLog(kafka_broker, delivery_timeout_s=120)
    await log.ensure_topics([TopicSpec(topic, partitions=3)])
    acked: list[int] = []
    spans: list[tuple[float, float]] = []  # (started, acknowledged) of each send
    done = anyio.Event()

    async def produce(producer):
        seq = 0
        while not done.is_set():
            started = time.monotonic()
            await producer.send([Message(topic, f"k{(seq + i) % 7}".encode(), b"%d" % (seq + i)) for i in range(50)])
            spans.append((started, time.monotonic()))
            acked.extend(range(seq, seq + 50))
            seq += 50
            await anyio.sleep(0.01)

    async with log, await log.producer() as producer:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(produce, producer)
                while len(acked) < 500:
                    await anyio.sleep(0.05)
                await anyio.to_thread.run_sync(kafka_script, "stop")
                down_at = time.monotonic()
                await anyio.sleep(1.0)  # stay down long enough for the producer to notice
                restarted_at = time.monotonic()
                await anyio.to_thread.run_sync(kafka_script, "start")
                after_restart = len(acked)
                with anyio.fail_after(120):
                    while len(acked) < after_restart + 500:
                        await anyio.sleep(0.05)
                done.set()
        finally:
            await anyio.to_thread.run_sync(kafka_script, "start")  # later tests need the broker back

        # nothing can be acknowledged between down_at and restarted_at, so a send begun before the restart and
        # acknowledged after it waited out the outage (begun before down_at or, the producer between sends as the
        # broker went, after it)
        assert any(s < restarted_at < e for s, e in spans), "no send was in flight across the outage"
        stored = sum((await log.end_offsets(topic)).values())
        async with await log.consumer(unique("g"), [topic], session_timeout_s=3.0) as reader:
            records = await drain(reader, len(acked))
    assert stored == len(acked), "a retried batch was stored twice"
    assert sorted(int(r.value) for r in records) == acked


@pytest.mark.anyio
async def test_a_stage_carries_on_through_a_broker_restart_answering_each_input_once(kafka_broker):
    """consume -> handle -> produce + commit (one transaction) while the broker goes away and comes back."""
    from kernelzero.schemas import ModuleAccepted, ModuleRejected, decode, make_event
    from kernelzero.stage import publish, run_stage

    prefix, n = unique("m"), 150

    class Echo:
        name = unique("echo")
        topics = ["modules.rejected"]

        async def handle(self, event):
            await anyio.sleep(0.03)
            if not event.payload.module_id.startswith(prefix):
                return []
            accepted = ModuleAccepted(module_id=event.payload.module_id, source="", apis=[], fingerprint="")
            return [make_event(accepted, correlation_id=event.payload.module_id, producer=self.name)]

    async with await open_log(f"kafka://{kafka_broker}?delivery_timeout_s=120") as log:
        await publish(log, [make_event(ModuleRejected(module_id=f"{prefix}-{i}", reason="duplicate"),
                                       correlation_id=f"{prefix}-{i}", producer="test") for i in range(n)])
        try:
            async with anyio.create_task_group() as tg:
                async def outage():
                    await anyio.sleep(1.5)
                    await anyio.to_thread.run_sync(kafka_script, "stop")
                    await anyio.sleep(2.0)
                    await anyio.to_thread.run_sync(kafka_script, "start")

                tg.start_soon(outage)
                with anyio.fail_after(240):
                    stats = await run_stage(log, Echo(), idle_exit_s=5.0, max_records=5, session_timeout_s=6.0)
        finally:
            await anyio.to_thread.run_sync(kafka_script, "start")  # later tests need the broker back
        async with await log.consumer(unique("reader"), ["modules.accepted"], session_timeout_s=3.0) as reader:
            # read to the end: a duplicate must not hide behind a count. Just after a restart a new reader's first
            # polls can come back empty before every partition is fetched (3 of 150 missed once that way), so
            # quiet counts only once every answer was seen, or after a minute
            answers, quiet, deadline = [], 0, time.monotonic() + 60
            while quiet < 4:
                batch = await reader.poll(500, 0.5)
                answers += [decode(r.value).payload.module_id for r in batch]
                waiting = len({m for m in answers if m.startswith(prefix)}) < n and time.monotonic() < deadline
                quiet = 0 if batch or waiting else quiet + 1
    mine = [m for m in answers if m.startswith(prefix)]
    assert stats.dead_lettered == 0
    assert sorted(mine) == sorted(f"{prefix}-{i}" for i in range(n))  # each answered once: none lost, none twice


@pytest.mark.anyio
async def test_partitions_follow_partition_for_like_the_embedded_backend(kafka_broker):
    topic = unique("placement")
    async with KafkaLog(kafka_broker) as log:
        await log.ensure_topics([TopicSpec(topic, partitions=5)])
        keys = [f"module-{i}".encode() for i in range(40)]
        async with await log.producer() as producer:
            await producer.send([Message(topic, k, b"x") for k in keys])
        async with await log.consumer(unique("g"), [topic], session_timeout_s=3.0) as c:
            records = await drain(c, 40)
    assert len(records) == 40
    assert {r.key: r.partition for r in records} == {k: partition_for(k, 5) for k in keys}
    assert len({r.partition for r in records}) > 1


@pytest.mark.anyio
async def test_ensure_topics_creates_missing_topics_with_partitions_and_retention(kafka_broker):
    kept, short = unique("kept.forever"), unique("short.lived")
    async with KafkaLog(kafka_broker) as log:
        await log.ensure_topics([TopicSpec(kept, partitions=3), TopicSpec(short, partitions=2, retention_ms=60_000)])
        await log.ensure_topics([TopicSpec(kept, partitions=8)])  # existing topics are left as they are
        topics = await log.topics()
        assert (topics[kept], topics[short]) == (3, 2)
        assert not any(t.startswith("__") for t in topics)
        admin = await log.admin()
        described = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, kept), ConfigResource(ConfigResourceType.TOPIC, short)]
        )
    # resources rows: (error_code, error_message, resource_type, resource_name, [(name, value, ...)])
    retention = {
        resource[3]: value
        for response in described for resource in response.resources
        for name, value, *_ in resource[4] if name == "retention.ms"
    }
    assert retention == {kept: "-1", short: "60000"}


@pytest.mark.anyio
async def test_open_log_creates_every_kernelzero_topic(kafka_broker):
    async with await open_log(f"kafka://{kafka_broker}") as log:
        topics = await log.topics()
    assert topics["samples.generated"] == 16 and topics["deadletter"] == 1


@pytest.mark.anyio
async def test_an_unreachable_broker_is_a_log_error_naming_it():
    with pytest.raises(LogError, match="127.0.0.1:9"):
        async with KafkaLog("127.0.0.1:9", metadata_timeout_s=5) as log:
            await log.topics()


@pytest.mark.anyio
async def test_an_idle_poll_leaves_the_event_loop_free(kafka_broker):
    topic = unique("idle")
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async with KafkaLog(kafka_broker) as log:
        await log.ensure_topics([TopicSpec(topic, partitions=1)])
        async with await log.consumer(unique("g"), [topic], session_timeout_s=3.0) as c:
            async with anyio.create_task_group() as tg:
                tg.start_soon(tick)
                started = time.monotonic()
                assert await c.poll(10, timeout_s=1.0) == []
                waited = time.monotonic() - started
                tg.cancel_scope.cancel()
    assert waited >= 0.9
    assert ticks >= 30  # ~100 possible in one second; a blocking poll would allow ~0


def test_url_options_are_read_and_checked():
    log = KafkaLog("127.0.0.1:9092?delivery_timeout_s=300&join_timeout_s=5")
    assert (log.bootstrap, log.delivery_timeout_s, log.join_timeout_s, log.metadata_timeout_s) == \
        ("127.0.0.1:9092", 300.0, 5.0, 15.0)
    with pytest.raises(LogError, match="unknown option 'retries'"):
        KafkaLog("127.0.0.1:9092?retries=3")
    with pytest.raises(LogError, match="join_timeout_s .* number of seconds"):
        KafkaLog("127.0.0.1:9092?join_timeout_s=soon")


@pytest.mark.anyio
async def test_end_offsets_committed_and_groups(kafka_broker):
    topic = unique("offsets")
    group = unique("g")
    async with KafkaLog(kafka_broker) as log:
        await log.ensure_topics([TopicSpec(topic, partitions=2)])
        assert await log.end_offsets(topic) == {0: 0, 1: 0}
        assert await log.end_offsets(unique("absent")) == {}
        async with await log.producer() as producer:
            await producer.send([Message(topic, None, b"%d" % i) for i in range(6)])  # keyless: round-robin
        assert await log.end_offsets(topic) == {0: 3, 1: 3}
        async with await log.consumer(group, [topic], session_timeout_s=3.0) as c:
            records = await drain(c, 6)
            await c.commit({(topic, 0): 2})
        assert await log.committed(group, topic) == {0: 2, 1: 0}
        assert group in await log.groups()
        assert sorted(int(r.value) for r in records) == list(range(6))
