"""The stage runner on the embedded log: outputs and offsets commit together, failures are parked, concurrency."""

import anyio
import pytest

from kernelzero.log import open_log
from kernelzero.schemas import ModuleAccepted, ModuleRejected, decode, make_event
from kernelzero.stage import message_for, publish, run_stage

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
