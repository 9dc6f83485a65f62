"""The projector service on both real logs: it projects what the log holds, keeps its offsets, and publishes a frontier snapshot."""

from __future__ import annotations

import uuid

import anyio
import pytest

from kernelzero.analytics.projection import Projection
from kernelzero.analytics.service import run_projector
from kernelzero.config import Config
from kernelzero.log import open_log, read_to_end
from tests.analytics.helpers import evaluation, module, publish_events, sample
from tests.log.conftest import kafka_broker  # noqa: F401  (the session fixture, used by the kafka case)

APIS = ["torch.relu"]


def events_of_three_modules(tag: str) -> list:
    events = []
    for m in range(3):
        module_id = f"m-{tag}-{m}"
        events.append(module(module_id, APIS))
        for s in range(2):
            sample_id = f"{module_id}-s{s}"
            events += [sample(sample_id, module_id, apis=APIS),
                       evaluation(sample_id, module_id, APIS, "correct" if s else "incorrect")]
    return events


def snapshots_on_the_log(url: str) -> int:
    async def count() -> int:  # records, not end offsets: the projector writes in transactions (Kafka: markers)
        async with await open_log(url) as log:
            return len([record async for record in read_to_end(log, "frontier.snapshot")])

    return anyio.run(count)


@pytest.mark.parametrize("backend", ["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_the_projector_projects_the_log_and_publishes_a_snapshot(backend: str, tmp_path, request) -> None:
    url = (f"embedded:{tmp_path / 'log.sqlite'}" if backend == "embedded"
           else f"kafka://{request.getfixturevalue('kafka_broker')}")
    tag = uuid.uuid4().hex[:8]  # the Kafka broker is shared: this test's modules are its own
    publish_events(url, events_of_three_modules(tag))
    before = snapshots_on_the_log(url)
    config = Config()
    config.log.url, config.log.session_timeout_s = url, 6.0
    config.analytics.db = str(tmp_path / "analytics.duckdb")
    config.analytics.snapshot_every = 6  # a snapshot once these six evaluations are in

    stats = anyio.run(lambda: run_projector(config, idle_exit_s=2.0))

    with Projection(config.analytics.db) as projection:
        verdicts = projection.con.execute(
            "SELECT verdict, count(*) FROM evaluations WHERE module_id LIKE ? GROUP BY ALL ORDER BY 1",
            [f"m-{tag}-%"]).fetchall()
    assert verdicts == [("correct", 3), ("incorrect", 3)]
    assert stats.snapshots == 1 and snapshots_on_the_log(url) == before + 1

    again = anyio.run(lambda: run_projector(config, idle_exit_s=2.0))  # restarted: resumes from its own offsets
    assert again.projected.evaluations == 0
