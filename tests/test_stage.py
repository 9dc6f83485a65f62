"""The stage runner on the embedded log: outputs and offsets commit together, failures are parked, concurrency,
stages that take whole batches of raw records from every topic and report at the head of the log."""

import anyio
import pytest

from kernelzero.log import Message, next_offsets, open_log
from kernelzero.schemas import DecodeError, ModuleAccepted, ModuleRejected, decode, make_event
from kernelzero.stage import ALL, publish, run_stage

pytestmark = pytest.mark.anyio


def rejected(i: int) -> object:
    return make_event(ModuleRejected(module_id=f"m{i}", reason="duplicate", detail=str(i)), correlation_id=f"m{i}",
                      producer="test")


class SlowEcho:
    """Answers each rejection with an acceptance after a pause; fails on detail '3'."""

    name = "echo"
    topics = ["modules.rejected"]

    def __init__(self):
        self.running = self.most_running = 0

    async def handle(self, event):
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await anyio.sleep(0.05)
        self.running -= 1
        if event.payload.detail == "3":
            raise RuntimeError("bad module")
        accepted = ModuleAccepted(module_id=event.payload.module_id, source="", apis=[], fingerprint=event.payload.detail)
        return [make_event(accepted, correlation_id=event.envelope.correlation_id, producer=self.name,
                           causation_id=event.event_id)]


async def read_all(log, topic):
    async with await log.consumer(f"reader-{topic}", [topic]) as consumer:
        records = await consumer.poll(1000, 1.0)
    return [decode(r.value) for r in records]


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_outputs_offsets_and_dead_letters(tmp_path, concurrency):
    async with await open_log(f"embedded:{tmp_path}/log.sqlite") as log:
        await publish(log, [rejected(i) for i in range(8)])
        stage = SlowEcho()
        stats = await run_stage(log, stage, idle_exit_s=0.5, concurrency=concurrency)
        assert (stats.consumed, stats.produced, stats.dead_lettered) == (8, 8, 1)
        assert stage.most_running == concurrency
        accepted = await read_all(log, "modules.accepted")
        assert sorted(int(e.payload.fingerprint) for e in accepted) == [0, 1, 2, 4, 5, 6, 7]
        letters = await read_all(log, "deadletter")
        assert [d.payload.reason for d in letters] == ["handler_error"] and "bad module" in letters[0].payload.error
        assert sum((await log.committed("echo", "modules.rejected")).values()) == 8
        # A second run finds nothing new: everything handled was committed with its outputs.
        again = await run_stage(log, SlowEcho(), idle_exit_s=0.3)
        assert again.consumed == 0


class Tally:
    """Takes raw records a batch at a time from every topic: an acceptance per rejection (garbage is its own
    business), and at the head of the log one 'head' acceptance counting the rejections seen, when there are
    new ones."""

    name = "tally"
    topics = ALL
    max_records = 3

    def __init__(self, fail_on_batch: int | None = None):
        self.fail_on_batch = fail_on_batch
        self.calls: list[str] = []
        self.taken: list[list] = []
        self.rejections = self.reported = 0

    async def opened(self, consumer):
        self.calls.append(f"opened {consumer.group}")

    async def take(self, records):
        self.calls.append("take")
        self.taken.append(records)
        if len(self.taken) == self.fail_on_batch:
            raise RuntimeError("projection failed")
        outputs = []
        for record in records:
            try:
                event = decode(record.value)
            except DecodeError:
                continue
            if event.type == "modules.rejected":
                self.rejections += 1
                accepted = ModuleAccepted(module_id=event.payload.module_id, source="", apis=[],
                                          fingerprint=event.payload.detail)
                outputs.append(make_event(accepted, correlation_id=event.envelope.correlation_id, producer=self.name))
        return outputs

    async def at_head(self):
        self.calls.append("at_head")
        if self.rejections == self.reported:
            return []
        self.reported = self.rejections
        head = ModuleAccepted(module_id="head", source="", apis=[], fingerprint=str(self.rejections))
        return [make_event(head, correlation_id="head", producer=self.name)]


async def test_a_batch_taking_stage_commits_outputs_with_offsets_and_reports_at_the_head(tmp_path):
    async with await open_log(f"embedded:{tmp_path}/log.sqlite") as log:
        await publish(log, [rejected(i) for i in range(8)])
        async with await log.producer() as producer:
            await producer.send([Message(topic="modules.rejected", key=b"junk", value=b"not an event")])

        # The second batch fails: the first batch's outputs and offsets are in the log, the second's are not.
        failing = Tally(fail_on_batch=2)
        with pytest.raises(RuntimeError, match="projection failed"):
            await run_stage(log, failing, idle_exit_s=0.5)
        assert failing.calls == ["opened tally", "take", "take"]
        first = failing.taken[0]
        assert len(first) == 3
        committed = {(t, p): o for t in await log.topics() for p, o in (await log.committed("tally", t)).items() if o}
        assert committed == next_offsets(first)
        done = [decode(r.value).payload.detail for r in first if r.key != b"junk"]
        assert sorted(e.payload.fingerprint for e in await read_all(log, "modules.accepted")) == sorted(done)

        # A fresh run redoes the failed batch and the rest: every rejection answered once, one report at the head.
        stage = Tally()
        stats = await run_stage(log, stage, idle_exit_s=0.5)
        assert stage.calls[0] == "opened tally" and "at_head" in stage.calls
        assert all(0 < len(batch) <= 3 for batch in stage.taken)
        accepted = await read_all(log, "modules.accepted")
        answers = sorted(e.payload.fingerprint for e in accepted if e.payload.module_id != "head")
        assert answers == sorted(str(i) for i in range(8))
        assert [e.payload.fingerprint for e in accepted if e.payload.module_id == "head"] == [str(8 - len(done))]
        assert await read_all(log, "deadletter") == []  # the garbage is the stage's to judge, not the host's
        # It read every topic, its own outputs too, and committed all it read: the group sits at the log's end.
        for topic in await log.topics():
            assert await log.committed("tally", topic) == await log.end_offsets(topic), topic
        assert (stats.consumed, stats.produced) == (9 - len(first) + len(accepted), 8 - len(done) + 1)


async def test_an_idle_exit_waits_for_partitions_a_dead_member_of_its_group_held(tmp_path):
    """A stage continued right after its process was killed: the dead member keeps its partitions until its
    session times out, and a stage that exited idle before then would leave their records for later."""
    async with await open_log(f"embedded:{tmp_path}/log.sqlite") as log:
        await publish(log, [rejected(i) for i in range(16) if i != 3])
        dead = await log.consumer("echo", ["modules.rejected"], session_timeout_s=2.0)
        await dead.poll(1, 0.1)  # joins the group and takes its share of the partitions
        dead._stop.set()  # its heartbeats stop as a killed process's would; its membership stays
        assert len(dead.assignment()) == len(await log.end_offsets("modules.rejected"))
        stats = await run_stage(log, SlowEcho(), idle_exit_s=0.3, session_timeout_s=2.0)
        assert stats.consumed == 15
        assert sorted(int(e.payload.fingerprint) for e in await read_all(log, "modules.accepted")) == \
            [i for i in range(16) if i != 3]
        await dead.close()


class Together(SlowEcho):
    """SlowEcho that also answers a poll's events at once; that fails on a batch holding detail '3'."""

    max_records = 4

    def __init__(self):
        super().__init__()
        self.batches: list[list[str]] = []

    async def handle_many(self, events):
        details = [e.payload.detail for e in events]
        self.batches.append(details)
        if "3" in details:
            raise RuntimeError("a bad module in the batch")
        return [await self.handle(e) for e in events]


async def test_a_stage_handling_a_poll_at_once_keeps_order_and_dead_letters_only_the_bad_event(tmp_path):
    async with await open_log(f"embedded:{tmp_path}/log.sqlite") as log:
        await publish(log, [rejected(i) for i in range(8)])
        async with await log.producer() as producer:
            await producer.send([Message(topic="modules.rejected", key=b"junk", value=b"not an event")])
        stage = Together()
        stats = await run_stage(log, stage, idle_exit_s=0.5)
        assert sorted(d for batch in stage.batches for d in batch) == [str(i) for i in range(8)]
        assert max(len(batch) for batch in stage.batches) > 1  # a poll's events together, not one at a time
        # the batch with '3' failed and was handled again one event at a time: its good events answered once
        accepted = await read_all(log, "modules.accepted")
        assert sorted(int(e.payload.fingerprint) for e in accepted) == [0, 1, 2, 4, 5, 6, 7]
        letters = await read_all(log, "deadletter")
        assert sorted(d.payload.reason for d in letters) == ["handler_error", "undecodable"]
        assert (stats.consumed, stats.produced, stats.dead_lettered) == (9, 9, 2)
