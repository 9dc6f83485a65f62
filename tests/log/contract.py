"""The event-log contract suite: one set of tests, subclassed once per real backend (embedded, kafka).

A subclass provides the `log_url` fixture and `session_timeout_s`. Every test works on topics
and groups with a fresh unique name, so a shared broker needs no cleaning between tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import anyio
import pytest

from kernelzero.log import Message, TopicSpec, next_offsets, open_log, read_to_end
from kernelzero.schemas import ModuleRejected, decode, encode, make_event
from kernelzero.stage import run_stage

CONSUME_AND_HANG = r"""
import sys, anyio
from kernelzero.log import open_log
async def main(url, group, topic, timeout):
    log = await open_log(url)
    consumer = await log.consumer(group, [topic], session_timeout_s=timeout)
    seen = 0
    while seen < int(sys.argv[5]):
        seen += len(await consumer.poll(500, 1.0))
    print(seen, flush=True)
    await anyio.sleep(3600)  # killed here, before any commit
anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
"""


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


def rejected(i: int, key: str) -> bytes:
    payload = ModuleRejected(module_id=key, reason="test", detail=str(i))
    return encode(make_event(payload, correlation_id=key, producer="contract"))


async def drain(consumer, expected: int, deadline_s: float = 60.0) -> list:
    records = []
    deadline = time.monotonic() + deadline_s
    while len(records) < expected and time.monotonic() < deadline:
        records += await consumer.poll(500, 0.5)
    return records


class CollectingStage:
    def __init__(self, topic: str):
        self.name = unique("stage")
        self.topics = [topic]
        self.handled = []

    async def handle(self, event):
        self.handled.append(event)
        return []


@pytest.mark.anyio
class EventLogContract:
    session_timeout_s = 3.0

    async def open_with_topic(self, log_url: str, partitions: int = 4):
        log = await open_log(log_url)
        topic = unique("contract")
        await log.ensure_topics([TopicSpec(topic, partitions=partitions)])
        return log, topic

    async def test_per_key_order(self, log_url):
        log, topic = await self.open_with_topic(log_url)
        keys = [f"module-{k}" for k in range(12)]
        async with log, await log.producer() as producer:
            for batch in range(5):
                await producer.send([
                    Message(topic, key.encode(), rejected(batch * 10 + i, key)) for i in range(10) for key in keys
                ])
            async with await log.consumer(unique("g"), [topic], session_timeout_s=self.session_timeout_s) as c:
                records = await drain(c, 600)
        assert len(records) == 600
        by_key: dict[str, list[int]] = {}
        for r in records:
            event = decode(r.value)
            by_key.setdefault(event.envelope.correlation_id, []).append(int(event.payload.detail))
        assert sorted(by_key) == sorted(keys)
        assert all(seq == list(range(50)) for seq in by_key.values())

    async def test_uncommitted_events_are_redelivered_after_a_member_dies(self, log_url):
        log, topic = await self.open_with_topic(log_url)
        group = unique("g")
        async with log:
            async with await log.producer() as producer:
                await producer.send([Message(topic, f"k{i}".encode(), rejected(i, f"k{i}")) for i in range(40)])
            doomed = subprocess.Popen(
                [sys.executable, "-c", CONSUME_AND_HANG, log_url, group, topic, str(self.session_timeout_s), "40"],
                stdout=subprocess.PIPE, text=True,
            )
            try:
                assert doomed.stdout.readline().strip() == "40"  # it owned every partition and read them all
            finally:
                os.kill(doomed.pid, signal.SIGKILL)
                doomed.wait()
            async with await log.consumer(group, [topic], session_timeout_s=self.session_timeout_s) as heir:
                records = await drain(heir, 40, deadline_s=self.session_timeout_s * 4 + 30)
                assert sorted(decode(r.value).payload.detail for r in records) == sorted(str(i) for i in range(40))
                await heir.commit(next_offsets(records))
            assert sum((await log.committed(group, topic)).values()) == 40

    async def test_group_members_share_partitions_and_rebalance(self, log_url):
        log, topic = await self.open_with_topic(log_url, partitions=6)
        group = unique("g")
        every = {(topic, p) for p in range(6)}
        async with log:
            a = await log.consumer(group, [topic], session_timeout_s=self.session_timeout_s)
            b = await log.consumer(group, [topic], session_timeout_s=self.session_timeout_s)

            async def settle(members, want):
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    async with anyio.create_task_group() as tg:
                        for m in members:
                            tg.start_soon(m.poll, 10, 0.2)
                    if want(members):
                        return True
                return False

            split = lambda ms: ms[0].assignment() and ms[1].assignment() and \
                not (ms[0].assignment() & ms[1].assignment()) and ms[0].assignment() | ms[1].assignment() == every
            assert await settle([a, b], split), (a.assignment(), b.assignment())
            await b.close()
            assert await settle([a], lambda ms: ms[0].assignment() == every), a.assignment()
            await a.close()

    async def test_replay_from_beginning_returns_every_event_once_in_key_order(self, log_url):
        log, topic = await self.open_with_topic(log_url)
        async with log:
            async with await log.producer() as producer:
                await producer.send([Message(topic, f"k{i % 7}".encode(), rejected(i, f"k{i % 7}")) for i in range(70)])
            async with await log.consumer(unique("g"), [topic], session_timeout_s=self.session_timeout_s) as c:
                first = await drain(c, 70)
                await c.commit(next_offsets(first))
                assert await c.poll(500, 0.5) == []
                await c.seek_to_beginning()
                again = await drain(c, 70)
                assert await c.poll(500, 0.5) == []
        assert sorted((r.partition, r.offset) for r in again) == sorted((r.partition, r.offset) for r in first)
        per_key: dict[str, list[int]] = {}
        for r in again:
            per_key.setdefault(r.key.decode(), []).append(int(decode(r.value).payload.detail))
        assert all(seq == sorted(seq) for seq in per_key.values())
        assert sum(len(s) for s in per_key.values()) == 70

    async def test_unknown_event_type_is_skipped_and_undecodable_bytes_are_dead_lettered(self, log_url):
        log, topic = await self.open_with_topic(log_url, partitions=1)
        future = make_event(ModuleRejected(module_id="m", reason="x"), correlation_id="m", producer="future")
        future.envelope.type = "modules.teleported"
        async with log:
            async with await log.producer() as producer:
                await producer.send([
                    Message(topic, b"m", encode(future)),
                    Message(topic, b"m", b"\xc1 definitely not msgpack"),
                    Message(topic, b"m", rejected(7, "m")),
                ])
            stage = CollectingStage(topic)
            stats = await run_stage(log, stage, idle_exit_s=2.0, session_timeout_s=self.session_timeout_s)
            assert [e.payload.detail for e in stage.handled] == ["7"]
            assert (stats.consumed, stats.skipped_unknown, stats.dead_lettered) == (3, 1, 1)
            async with await log.consumer(unique("dlq"), ["deadletter"], session_timeout_s=self.session_timeout_s) as c:
                letters = [decode(r.value).payload for r in await drain(c, 10**9, deadline_s=5)]
            mine = [d for d in letters if d.topic == topic]
            assert len(mine) == 1 and mine[0].reason == "undecodable"
            assert mine[0].value == b"\xc1 definitely not msgpack" and mine[0].offset == 1
            assert sum((await log.committed(stage.name, topic)).values()) == 3

    async def test_commit_with_produces_and_commits_together(self, log_url):
        log, topic = await self.open_with_topic(log_url, partitions=1)
        out = unique("out")
        await log.ensure_topics([TopicSpec(out, partitions=1)])
        group = unique("g")
        async with log:
            async with await log.producer() as producer:
                await producer.send([Message(topic, b"m", rejected(i, "m")) for i in range(5)])
            async with await log.consumer(group, [topic], session_timeout_s=self.session_timeout_s) as c:
                records = await drain(c, 5)
                await c.commit_with([Message(out, b"m", r.value) for r in records], next_offsets(records))
            assert await log.committed(group, topic) == {0: 5}
            # Count what a reader sees: Kafka's transaction marker takes an offset of its own.
            async with await log.consumer(unique("reader"), [out], session_timeout_s=self.session_timeout_s) as r:
                copied = await drain(r, 6, deadline_s=3)
            assert [c.value for c in copied] == [r.value for r in records]

    async def test_the_position_passes_what_is_not_a_record_and_a_read_to_the_end_stops_there(self, log_url):
        """A stage's outputs are written in a transaction: on Kafka its commit marker ends the partition."""
        log, source = await self.open_with_topic(log_url, partitions=1)
        out = unique("out")
        await log.ensure_topics([TopicSpec(out, partitions=1)])
        async with log:
            async with await log.producer() as producer:
                await producer.send([Message(source, b"m", rejected(i, "m")) for i in range(3)])
            async with await log.consumer(unique("g"), [source], session_timeout_s=self.session_timeout_s) as c:
                records = await drain(c, 3)
                await c.commit_with([Message(out, b"m", r.value) for r in records], next_offsets(records))
            ends = await log.end_offsets(out)
            async with await log.consumer(unique("reader"), [out], session_timeout_s=self.session_timeout_s) as r:
                assert len(await drain(r, 3)) == 3
                await r.poll(500, 0.5)  # nothing more to return: the marker, where there is one, is passed
                assert await r.position((out, 0)) == ends[0]
            # a reader that counted records' offsets would wait out its deadline (and the test's time limit)
            read = [record.value async for record in read_to_end(log, out, deadline_s=3600)]
            assert read == [r.value for r in records]
