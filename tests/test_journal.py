"""A run directory's journal: steps done are not run again, a failed step is, and a run continued with other arguments is refused before anything runs."""

from __future__ import annotations

import json

import pytest

from kernelzero.app.cli import main as cli_main
from kernelzero.app.journal import Journal, arguments_differ


def test_a_step_runs_once_and_only_a_finished_step_is_marked(tmp_path):
    ran: list[str] = []

    def step(name: str, code: int = 0):
        return lambda: ran.append(name) or code

    journal = Journal(tmp_path)
    assert journal.run("round 1", step("round 1")) == 0
    assert journal.run("round 2", step("round 2", code=3)) == 3
    again = Journal(tmp_path)  # a new process reads what the last one finished
    assert again.done == ["round 1"]
    assert again.run("round 1", step("round 1 again")) == 0 and again.run("round 2", step("round 2")) == 0
    assert ran == ["round 1", "round 2", "round 2"]
    assert json.loads((tmp_path / "steps.json").read_text()) == ["round 1", "round 2"]
    assert not list(tmp_path.glob("*.partial"))


def test_the_first_arguments_are_kept_and_others_named(tmp_path):
    assert arguments_differ(tmp_path / "run", {"rounds": 3, "kl_max": 0.01}) == []
    assert arguments_differ(tmp_path / "run", {"rounds": 3, "kl_max": 0.01}) == []
    assert arguments_differ(tmp_path / "run", {"rounds": 5, "kl_max": 0.01}) == ["--rounds 3 (now 5)"]


@pytest.mark.parametrize("command,rounds", [("demo", 3), ("experiment", 8)])
def test_a_run_continued_with_other_arguments_exits_2_naming_them(tmp_path, capsys, command, rounds):
    out = tmp_path / "run"
    assert cli_main([command, "--out", str(out), "--rounds", "0"]) == 2  # refused before anything is recorded
    assert not out.exists()
    arguments_differ(out, {"rounds": rounds})
    assert cli_main([command, "--out", str(out), "--rounds", str(rounds + 1), "--kl-max", "0.05"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--rounds {rounds} (now {rounds + 1})" in err and "--kl-max None (now 0.05)" in err and "another --out" in err
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]  # nothing ran


@pytest.mark.parametrize("left", ["demo.json", "log.sqlite"])
def test_a_finished_demo_or_one_without_its_steps_is_not_run_again(tmp_path, capsys, left):
    out = tmp_path / "run"
    out.mkdir()
    (out / left).write_text("{}")
    assert cli_main(["demo", "--out", str(out)]) == 2
    assert "choose another --out" in " ".join(capsys.readouterr().err.split())
    assert sorted(p.name for p in out.iterdir()) == [left]


def test_a_continued_run_keeps_the_bootstrap_it_started_from(tmp_path):
    import msgspec
    from rich.console import Console

    from kernelzero.app.demo import run_bootstrap
    from kernelzero.bootstrap.from_zero import DEMO_PLAN, Bootstrap
    from kernelzero.config import Config

    made = {name: tmp_path / "cache" / name for name in ("distill-a", "models-b/coder", "models-b/proposer")}
    for path in made.values():
        path.mkdir(parents=True)
    boot = Bootstrap(distill_dir=str(made["distill-a"]), coder_model=str(made["models-b/coder"]),
                     proposer_model=str(made["models-b/proposer"]), heldout_sets=["add+relu"],
                     max_tokens={"coder": 300}, sft={})
    out = tmp_path / "run"
    out.mkdir()
    (out / "bootstrap.json").write_bytes(msgspec.json.encode(boot))
    # sizes that would make another bootstrap, were it asked for: the recorded one is taken as it is
    args = loop_args("--distill", "3", "--size", "small")
    assert run_bootstrap(Console(stderr=True), Config(), args, DEMO_PLAN, out) == boot


def loop_args(*options: str):
    import argparse

    from kernelzero.app import demo

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return parser.parse_args(list(options))
