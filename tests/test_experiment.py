"""`kernelzero experiment`'s arithmetic and arms: per-module pass rates turned into the table, paired against the control; the runs themselves are benchmarks (docs/BENCHMARKS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelzero.app.experiment import ARMS, CONTROL, arm_config, markdown, results
from kernelzero.config import Config


def measured(sampled: dict[int, float], greedy: dict[int, float], train: list[float]) -> dict:
    curve = [{"policy_version": v, "train_samples": 32, "train_pass_rate": rate, "kl_to_start": 0.01 * v}
             for v, rate in enumerate(train)]
    return {"seconds": 60.0, "final": {"sampled": sampled, "greedy": greedy}, "curve": curve, "verdicts": []}


def test_the_arms_differ_from_the_base_only_where_they_say(tmp_path):
    base = Config()
    a, b, c = (arm_config(base, arm, tmp_path / arm) for arm in "abc")
    assert a.log.url == f"embedded:{tmp_path / 'a' / 'log.sqlite'}" and a.trainer.checkpoint_dir == str(tmp_path / "a" / "checkpoints")
    assert (a.proposer.sampling, a.trainer.proposer_steps, a.trainer.learning_rate) == \
        ("frontier", base.trainer.proposer_steps, base.trainer.learning_rate)
    assert (b.proposer.sampling, b.trainer.proposer_steps) == ("uniform", 0)
    assert c.trainer.learning_rate == c.trainer.lora_learning_rate == 0.0 and c.proposer.sampling == "frontier"
    assert base.log.url != a.log.url  # the base is left as it was
    assert CONTROL == "c" and set(ARMS) == {"a", "b", "c"}


def test_results_pair_each_arm_with_the_control_module_by_module():
    modules = 64
    start = {"sampled": {str(i): 0.25 for i in range(modules)}, "greedy": {str(i): 0.5 for i in range(modules)}}
    better = {i: 0.5 for i in range(modules)}
    same = {i: 0.25 for i in range(modules)}
    arms = {"a": measured(better, better, [0.3, 0.35, 0.4]), "c": measured(same, same, [0.3, 0.3, 0.3])}
    table = results(start, arms, modules)
    a = table["a"]["sampled"]
    assert a["start"]["pass_at_1"] == pytest.approx(0.25) and a["end"]["pass_at_1"] == pytest.approx(0.5)
    assert a["end"]["low"] < 0.5 < a["end"]["high"] and a["end"]["modules"] == modules
    assert a["minus_control"]["difference"] == pytest.approx(0.25) and a["minus_control"]["low"] > 0
    assert "minus_control" not in table["c"]["sampled"]
    assert table["a"]["train_pass_rate"] == {"first": 0.3, "lowest": 0.3, "last": 0.4, "samples": 96}
    assert table["a"]["kl_to_start_last"] == pytest.approx(0.02)


def test_a_module_one_arm_did_not_measure_is_left_out_of_the_pair():
    start = {"sampled": {"0": 0.0, "1": 0.0}, "greedy": {"0": 0.0, "1": 0.0}}
    arms = {"a": measured({0: 1.0}, {0: 1.0, 1: 1.0}, [0.5]), "c": measured({0: 0.0, 1: 0.0}, {0: 0.0, 1: 0.0}, [0.5])}
    table = results(start, arms, 2)
    assert table["a"]["sampled"]["end"]["modules"] == 1 and table["a"]["sampled"]["minus_control"]["modules"] == 1
    assert table["a"]["greedy"]["minus_control"]["modules"] == 2
    text = markdown(table, type("Args", (), {"rounds": 1, "modules": 2, "group_size": 4, "heldout": 2})())
    assert "| a: " in text and "| c: " in text and "+1.000" in text
    assert "pass@4" not in text, "a measure the runs did not record gets no column"


def test_the_probe_of_training_rows_is_shown_at_every_measurement():
    start = {"sampled": {"0": 0.5}, "greedy": {"0": 1.0}, "probe": {"0": 0.75, "1": 0.25}}
    arm = measured({0: 0.5}, {0: 1.0}, [0.5])
    arm["measured"] = {"r4": {"probe": {"0": 0.25, "1": 0.25}}, "r8": {"probe": {"0": 0.5, "1": 0.5}}}
    arm["final"]["probe"] = arm["measured"]["r8"]["probe"]
    table = results(start, {"a": arm}, 2)
    assert table["a"]["probe_by_measurement"] == {"v0": 0.5, "r4": 0.25, "r8": 0.5}
    assert table["a"]["probe"]["end"]["pass_at_1"] == pytest.approx(0.5)
    text = markdown(table, type("Args", (), {"rounds": 1, "modules": 2, "group_size": 4, "heldout": 2})())
    assert "a: 0.500 (v0), 0.250 (r4), 0.500 (r8)" in text


def test_pass_at_k_is_paired_and_shown_where_every_run_recorded_it():
    start = {"sampled": {"0": 0.25, "1": 0.0}, "greedy": {"0": 0.0, "1": 0.0}, "pass@k": {"0": 1.0, "1": 0.0}}
    a = measured({0: 0.5, 1: 0.25}, {0: 0.0, 1: 0.0}, [0.5])
    c = measured({0: 0.25, 1: 0.0}, {0: 0.0, 1: 0.0}, [0.5])
    a["final"]["pass@k"], c["final"]["pass@k"] = {0: 1.0, 1: 1.0}, {0: 1.0, 1: 0.0}
    table = results(start, {"a": a, "c": c}, 2)
    assert table["a"]["pass@k"]["start"]["pass_at_1"] == pytest.approx(0.5)
    assert table["a"]["pass@k"]["minus_control"]["difference"] == pytest.approx(0.5)
    text = markdown(table, type("Args", (), {"rounds": 1, "modules": 2, "group_size": 4, "heldout": 2})())
    assert "pass@4, v0 -> end" in text and "+0.500" in text


def loop_args(command: str, *options: str):
    import argparse

    from kernelzero.app import demo, experiment

    parser = argparse.ArgumentParser()
    {"demo": demo, "experiment": experiment}[command].add_arguments(parser)
    return parser.parse_args(list(options))


def test_the_loop_samples_and_trains_in_float32_unless_told_otherwise(tmp_path):
    from kernelzero.app.demo import loop_config

    config = loop_config(Config(), tmp_path, loop_args("experiment", "--device", "cuda"))
    assert config.coder.dtype == config.proposer.dtype == config.trainer.dtype == "float32"
    chosen = Config()
    chosen.coder.dtype = "bfloat16"
    assert loop_config(chosen, tmp_path, loop_args("demo")).coder.dtype == "bfloat16"


def test_the_trust_region_and_learning_rate_are_the_commands_options(tmp_path):
    from kernelzero.app.demo import loop_config

    default = loop_config(Config(), tmp_path, loop_args("experiment")).trainer
    assert (default.learning_rate, default.kl_max, default.lora_rank) == (1e-4, 0.01, 0)
    chosen = loop_config(Config(), tmp_path, loop_args("demo", "--learning-rate", "3e-4", "--kl-max", "0.05")).trainer
    assert (chosen.learning_rate, chosen.kl_max) == (3e-4, 0.05)


def test_the_loop_sizes_evaluator_workers_by_cores_and_keeps_a_users_choice(tmp_path):
    """Its modules are kilobytes: a worker per core on a GPU, where the default gives one per 16 GB of the card."""
    import os

    import msgspec

    from kernelzero.app.demo import loop_config
    from kernelzero.config import EvaluatorConfig

    loop = loop_config(Config(), tmp_path, loop_args("experiment"))
    assert loop.evaluator.workers_per_gpu == max(1, (os.cpu_count() or 1) - 1)
    assert loop.proposer.temperature == 0.7
    chosen = Config(evaluator=msgspec.structs.replace(EvaluatorConfig(), workers_per_gpu=3))
    assert loop_config(chosen, tmp_path, loop_args("demo")).evaluator.workers_per_gpu == 3


@pytest.mark.parametrize("command,options,named", [
    ("experiment", ["--kl-max", "-0.1"], "--kl-max"),
    ("experiment", ["--measure-every", "0"], "--measure-every"),
    ("demo", ["--learning-rate", "nan"], "--learning-rate"),
    ("demo", ["--group-size", "0"], "--group-size"),
])
def test_a_bad_loop_option_exits_2_naming_it_before_anything_runs(tmp_path, capsys, command, options, named):
    from kernelzero.app.cli import main as cli_main

    out = tmp_path / "run"
    assert cli_main([command, "--out", str(out), *options]) == 2
    assert named in capsys.readouterr().err
    assert not out.exists()


def test_per_module_reads_held_out_greedy_pass_at_k_and_probe_rows_of_one_measurement(tmp_path):
    import msgspec

    from kernelzero.app.experiment import per_module
    from kernelzero.schemas import make_event
    from tests.analytics.helpers import evaluation, module, publish_events, sample

    config = Config()
    config.log.url, config.analytics.db = f"embedded:{tmp_path / 'log.sqlite'}", str(tmp_path / "a.duckdb")
    config.coder.group_size = 2

    def answered(module_id: str, split: str, verdicts: list[str], temperature: float = 1.0):
        accepted = module(module_id, ["torch.relu"])
        events = [make_event(msgspec.structs.replace(accepted.payload, split=split), correlation_id=module_id,
                             producer="heldout")]
        for i, verdict in enumerate(verdicts):
            made, judged = sample(f"{module_id}-{i}", module_id), evaluation(f"{module_id}-{i}", module_id, [], verdict)
            events += [make_event(msgspec.structs.replace(made.payload, split=split, temperature=temperature),
                                  correlation_id=module_id, producer="coder", policy_version=1),
                       make_event(msgspec.structs.replace(judged.payload, split=split), correlation_id=module_id,
                                  producer="evaluator", policy_version=1)]
        return events

    publish_events(config.log.url, [
        *answered("heldout-v0-0000", "heldout", ["correct", "incorrect"]),
        *answered("heldout-v0-0000-greedy", "heldout", ["correct"], temperature=0.0),
        *answered("heldout-v0-0001", "heldout", ["incorrect", "incorrect"]),
        *answered("heldout-r8-0000", "heldout", ["correct", "correct"]),  # another measurement
        *answered("probe-v0-0003", "probe", ["correct", "correct"]),
        *answered("m-train", "train", ["correct", "correct"]),
    ])
    rates = per_module(config, "v0")
    assert rates["sampled"] == {0: 0.5, 1: 0.0} and rates["greedy"] == {0: 1.0}
    assert rates["pass@k"] == {0: 1.0, 1: 0.0} and rates["probe"] == {3: 1.0}


def test_an_arm_measures_every_few_rounds_and_at_its_end_and_continues_where_it_stopped(tmp_path, monkeypatch):
    """The schedule alone: rounds and measurements are recorded calls here (the loop itself: tests/test_demo.py)."""
    import argparse

    from kernelzero.app import experiment

    calls = []

    def stages(console, roles, config, label, started):
        calls.append(label)
        return 0

    def measured(console, journal, config, rows, args, tag, started):
        return journal.run(f"measure {tag}", lambda: calls.append(f"measure {tag}") or 0)

    monkeypatch.setattr(experiment, "run_stages", stages)
    monkeypatch.setattr(experiment, "measure", measured)
    monkeypatch.setattr(experiment, "per_module", lambda config, tag: {"probe": {0: float(tag[1:])}})
    monkeypatch.setattr(experiment, "summarize", lambda config, queries: {"curve": [], "verdicts": []})
    console = type("Console", (), {"print": lambda self, *a: None})()
    args = argparse.Namespace(rounds=5, measure_every=2)
    journal = experiment.journal_in(tmp_path / "arm-a")
    journal.run("round 1", lambda: 0)  # a run stopped after its first round
    result = experiment.run_arm(console, Config(), "a", tmp_path / "arm-a", (tmp_path, tmp_path), args, 0.0)
    assert calls == ["arm a: round 2/5", "measure r2", "arm a: round 3/5", "arm a: round 4/5", "measure r4",
                     "arm a: round 5/5", "measure r5"]
    assert list(result["measured"]) == ["r2", "r4", "r5"] and result["final"] == {"probe": {0: 5.0}}
    assert experiment.run_arm(console, Config(), "a", tmp_path / "arm-a", (tmp_path, tmp_path), args, 0.0)["final"] \
        == {"probe": {"0": 5.0}}, "a finished arm is read back"
