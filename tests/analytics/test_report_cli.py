"""The commands end to end on a real embedded log: sql, frontier, failures, replay, report, and the projector service."""

from __future__ import annotations

import json

import anyio
import pytest

from kernelzero.analytics.service import run_projector
from kernelzero.analytics.synthetic import synthetic_run
from kernelzero.app import cli
from kernelzero.config import load_config
from kernelzero.log import open_log

from tests.analytics.helpers import publish_events

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    publish_events(f"embedded:{path}/log.sqlite", list(synthetic_run(40, group_size=4)))
    return path


def test_report_renders_png_images_from_a_projected_log(run_dir, tmp_path, capsys):
    out = tmp_path / "report"
    assert cli.main(["report", "--db", str(run_dir), "--out", str(out)]) == 0
    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == ["frontier.png", "heldout.png", "pass_rate.png", "speedup.png", "verdicts.png"]
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 5000 and data[12:16] == b"IHDR"
    page = (out / "index.html").read_text()
    assert all(f"src='{p.name}'" in page for p in pngs) and "evaluated samples" in page


def test_sql_answers_and_rejects_bad_sql(run_dir, capsys):
    query = "SELECT count(*) AS n FROM evaluations"
    assert cli.main(["sql", query, "--db", str(run_dir), "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    expected = sum(e.type == "samples.evaluated" for e in synthetic_run(40, group_size=4))
    assert json.loads(line) == {"n": expected}
    assert cli.main(["sql", "SELEC 1", "--db", str(run_dir)]) == 2
    assert "syntax error" in capsys.readouterr().err
    assert cli.main(["sql", "DELETE FROM events", "--db", str(run_dir)]) == 2  # the database is read-only here


def test_frontier_failures_and_replay_commands(run_dir, tmp_path, capsys):
    assert cli.main(["frontier", "--db", str(run_dir), "--csv", "--kind", "api"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("kind,apis,attempts") and all(line.startswith("api,") for line in lines[1:])
    assert cli.main(["failures", "--db", str(run_dir), "--json", "--verdict", "compile_error"]) == 0
    classes = {json.loads(line)["failure_class"] for line in capsys.readouterr().out.splitlines()}
    assert classes == {"undefined_identifier", "non_power_of_2"}
    target = tmp_path / "sft.jsonl"
    assert cli.main(["replay", "--db", str(run_dir), "--kind", "sft", "--to", str(target)]) == 0
    assert target.read_text().count("\n") > 0


def test_empty_log_and_missing_database_say_so(tmp_path, capsys):
    publish_events(f"embedded:{tmp_path}/empty/log.sqlite", [])
    assert cli.main(["frontier", "--db", str(tmp_path / "empty")]) == 0
    assert "nothing yet" in capsys.readouterr().err
    assert cli.main(["sql", "SELECT 1", "--db", str(tmp_path / "absent")]) == 2
    assert "no analytics database" in capsys.readouterr().err


def test_projector_service_publishes_a_frontier_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELZERO_LOG_URL", f"embedded:{tmp_path}/log.sqlite")
    monkeypatch.setenv("KERNELZERO_ANALYTICS_DB", str(tmp_path / "analytics.duckdb"))
    monkeypatch.setenv("KERNELZERO_ANALYTICS_SNAPSHOT_EVERY", "10")
    config = load_config()
    publish_events(config.log.url, list(synthetic_run(10, group_size=4)))
    stats = anyio.run(lambda: run_projector(config, idle_exit_s=1.0))
    assert stats.snapshots == 1 and stats.projected.evaluations > 10

    async def snapshots() -> int:
        log = await open_log(config.log.url)
        try:
            return sum((await log.end_offsets("frontier.snapshot")).values())
        finally:
            await log.close()

    assert anyio.run(snapshots) == 1


def test_rebuild_gives_the_same_answers(run_dir, capsys):
    query = "SELECT verdict, count(*) AS n FROM attempts GROUP BY 1 ORDER BY 1"
    assert cli.main(["sql", query, "--db", str(run_dir), "--csv"]) == 0
    before = capsys.readouterr().out
    assert cli.main(["sql", query, "--db", str(run_dir), "--csv", "--rebuild"]) == 0
    assert capsys.readouterr().out == before and before.count("\n") > 2
