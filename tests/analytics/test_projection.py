"""The projection: idempotent on event_id and offsets, atomic with its offsets, skips what it cannot read, rebuilds identically."""

from __future__ import annotations

import anyio
import pytest

from kernelzero.analytics.projection import TABLES, Projection
from kernelzero.analytics.sync import sync_projection
from kernelzero.analytics.synthetic import synthetic_run
from kernelzero.config import AnalyticsConfig
from kernelzero.log import Record, open_log
from kernelzero.schemas import ModuleProposed, encode, make_event
from kernelzero.stage import publish

from tests.analytics.helpers import evaluation, module, publish_events, records, sample


def _counts(projection: Projection) -> dict[str, int]:
    return {t: projection.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def _events():
    return [module("m1", ["torch.relu"]), sample("s1", "m1"), evaluation("s1", "m1", ["torch.relu"], speedup=1.5)]


def test_same_records_twice_insert_once(tmp_path):
    batch = records(_events())
    with Projection(tmp_path / "a.duckdb") as projection:
        first = projection.apply(batch)
        second = projection.apply(batch)
        assert (first.projected, second.projected, second.redelivered) == (3, 0, 3)
        counts = _counts(projection)
    assert (counts["events"], counts["evaluations"], counts["samples"], counts["modules_accepted"]) == (3, 1, 1, 1)


def test_same_event_at_two_offsets_inserts_once(tmp_path):
    event = evaluation("s1", "m1", ["torch.relu"])
    with Projection(tmp_path / "a.duckdb") as projection:
        projection.apply(records([event]))
        projection.apply(records([event], start=1))  # a producer retry appended it again
        assert _counts(projection)["evaluations"] == 1
        assert projection.offsets == {("samples.evaluated", 0): 2}


class CrashBeforeCommit(Projection):
    """Dies after the rows are inserted, inside the transaction, before it commits."""

    def _store_offsets(self, offsets):
        super()._store_offsets(offsets)
        raise RuntimeError("simulated crash")


def test_crash_between_insert_and_commit_leaves_one_row(tmp_path):
    batch = records(_events())
    with CrashBeforeCommit(tmp_path / "a.duckdb") as crashing:
        with pytest.raises(RuntimeError, match="simulated crash"):
            crashing.apply(batch)
        assert _counts(crashing)["events"] == 0
        assert crashing.load_offsets() == {}
    with Projection(tmp_path / "a.duckdb") as restarted:
        assert restarted.apply(batch).projected == 3
        restarted.apply(batch)
        assert _counts(restarted)["evaluations"] == 1
        assert restarted.load_offsets()[("samples.evaluated", 0)] == 1


def test_unknown_and_undecodable_are_counted_and_skipped(tmp_path):
    good = records([evaluation("s1", "m1", ["torch.relu"])])[0]
    unknown = make_event(ModuleProposed(module_id="m1", source="x", apis=[]), correlation_id="m1", producer="p")
    unknown.envelope.type = "modules.teleported"
    bad = [Record("samples.evaluated", 0, 1, None, b"\x00not msgpack", 0),
           Record("modules.teleported", 0, 0, None, encode(unknown), 0)]
    with Projection(tmp_path / "a.duckdb") as projection:
        stats = projection.apply([good, *bad])
        assert (stats.projected, stats.undecodable, stats.unknown) == (1, 1, 1)
        skipped = projection.con.execute(
            "SELECT topic, reason FROM projection_skipped ORDER BY topic").fetchall()
        assert skipped == [("modules.teleported", "unknown_type"), ("samples.evaluated", "undecodable")]
        assert projection.offsets[("samples.evaluated", 0)] == 2


def _table_rows(projection: Projection) -> dict[str, list[tuple]]:
    return {t: projection.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}


def test_rebuild_from_the_log_yields_identical_tables(tmp_path):
    url = f"embedded:{tmp_path}/log.sqlite"
    events = list(synthetic_run(30, group_size=4))
    publish_events(url, events[: len(events) // 2])
    publish_events(url, events[len(events) // 2:] + events[:5])  # redelivered duplicates too

    async def project(path, *, reset=False):
        log = await open_log(url)
        try:
            with Projection(path) as projection:
                if reset:
                    projection.reset()
                await sync_projection(log, projection, batch_records=97)
                return _table_rows(projection), projection.offsets
        finally:
            await log.close()

    incremental, offsets = anyio.run(project, tmp_path / "a.duckdb")
    fresh, fresh_offsets = anyio.run(project, tmp_path / "b.duckdb")  # the group's commits are ahead: seeks back
    rebuilt, _ = anyio.run(lambda: project(tmp_path / "a.duckdb", reset=True))
    assert len(incremental["events"]) == len(events)
    assert len(incremental["evaluations"]) == sum(e.type == "samples.evaluated" for e in events)
    assert fresh == incremental and fresh_offsets == offsets
    assert rebuilt == incremental


def test_group_commits_behind_duckdb_are_skipped_not_reprojected(tmp_path):
    """A crash after the DuckDB commit but before the log commit: the records come again and insert nothing."""
    url = f"embedded:{tmp_path}/log.sqlite"
    events = list(synthetic_run(5, group_size=2))
    publish_events(url, events)

    async def run():
        log = await open_log(url)
        try:
            with Projection(tmp_path / "a.duckdb") as projection:
                first = await sync_projection(log, projection, batch_records=AnalyticsConfig().batch_records)
                topics = sorted(await log.topics())
                async with await log.consumer("projector", topics) as consumer:
                    await consumer.commit({tp: 0 for tp in projection.offsets})  # the log forgot our commits
                await publish(log, events[-1:])  # the same event once more, at a new offset
                second = await sync_projection(log, projection, batch_records=AnalyticsConfig().batch_records)
                return first, second, _counts(projection)["events"]
        finally:
            await log.close()

    first, second, events_rows = anyio.run(run)
    assert first.projected == len(events) == events_rows
    # the group's old records come again and are skipped by offset; the re-sent event by event_id
    assert second.redelivered > 0 and second.records == second.redelivered + 1
    assert events_rows == len(events)


def test_a_database_from_another_schema_is_rebuilt(tmp_path):
    with Projection(tmp_path / "a.duckdb") as projection:
        projection.apply(records(_events()))
        projection.con.execute("UPDATE projection_meta SET value = 'older' WHERE key = 'schema_sha256'")
    with Projection(tmp_path / "a.duckdb") as reopened:
        assert reopened.offsets == {} and _counts(reopened)["events"] == 0
        assert reopened.apply(records(_events())).projected == 3
