"""`kernelzero log tail` and `log stats` on a real embedded log."""

import json

import anyio

from kernelzero.app.cli import main
from kernelzero.log import next_offsets, open_log
from kernelzero.schemas import ModuleRejected, make_event
from kernelzero.stage import message_for


def fill(url: str, n: int) -> None:
    async def go():
        async with await open_log(url) as log:
            async with await log.producer() as producer:
                await producer.send([message_for(make_event(
                    ModuleRejected(module_id=f"m{i}", reason="duplicate", detail=str(i)), correlation_id="same", producer="t",
                )) for i in range(n)])
            async with await log.consumer("reader", ["modules.rejected"]) as consumer:
                records = await consumer.poll(3, 1.0)
                await consumer.commit(next_offsets(records[:3]))

    anyio.run(go)


def test_tail_prints_the_last_events_as_json(tmp_path, capsysbinary):
    url = f"embedded:{tmp_path}/log.sqlite"
    fill(url, 5)
    assert main(["log", "--broker", url, "tail", "modules.rejected", "-n", "2"]) == 0
    lines = [json.loads(line) for line in capsysbinary.readouterr().out.splitlines()]
    assert [line["payload"]["detail"] for line in lines] == ["3", "4"]
    assert lines[0]["type"] == "modules.rejected" and lines[0]["_at"].startswith("modules.rejected/")


def test_stats_counts_events_and_group_lag(tmp_path, capsys):
    url = f"embedded:{tmp_path}/log.sqlite"
    fill(url, 5)
    assert main(["log", "--broker", url, "stats"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "modules.rejected" in line and "reader" not in line)
    assert "modules.rejected: 5" in row
    lag_row = next(line for line in out.splitlines() if "reader" in line)
    assert lag_row.split()[-2:] == ["3", "2"] or lag_row.replace("│", " ").split()[-2:] == ["3", "2"]


def test_global_options_after_the_action_as_users_type_them(tmp_path, capsys):
    url = f"embedded:{tmp_path}/log.sqlite"
    fill(url, 2)
    assert main(["log", "stats", "--broker", url]) == 0
    assert "modules.rejected: 2" in capsys.readouterr().out
    assert main(["log", "--broker", f"embedded:{tmp_path}/other.sqlite", "stats", "--broker", url]) == 0, \
        "the option after the action wins"


def test_a_log_that_is_not_there_is_named_and_nothing_is_created(tmp_path, capsys):
    missing = tmp_path / "typo" / "x.db"
    for action in (["stats"], ["tail", "modules.rejected"]):
        assert main(["log", *action, "--broker", f"embedded:{missing}"]) == 2
        assert f"no event log at {missing}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_unknown_topic_and_bad_broker_exit_nonzero(tmp_path, capsys):
    fill(f"embedded:{tmp_path}/l.sqlite", 1)
    assert main(["log", "--broker", f"embedded:{tmp_path}/l.sqlite", "tail", "nope"]) == 2
    assert main(["log", "--broker", "ftp://x", "stats"]) == 2
    assert "unknown broker URL" in capsys.readouterr().err


def test_reading_to_given_ends_leaves_out_what_came_after(tmp_path):
    """`tail --follow` prints from the ends it read first: the scan before it must stop there, or a record twice."""
    from kernelzero.log import read_to_end

    url = f"embedded:{tmp_path}/log.sqlite"
    fill(url, 3)

    async def go() -> list[str]:
        async with await open_log(url) as log:
            ends = await log.end_offsets("modules.rejected")
            async with await log.producer() as producer:
                await producer.send([message_for(make_event(ModuleRejected(module_id="late", reason="duplicate"),
                                                            correlation_id="same", producer="t"))])
            return [r.key.decode() async for r in read_to_end(log, "modules.rejected", ends=ends)]

    assert len(anyio.run(go)) == 3
