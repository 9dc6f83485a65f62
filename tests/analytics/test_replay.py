"""Each replay dataset written as JSON lines and Parquet, read back, and checked against the hand-built events."""

from __future__ import annotations

import json

import duckdb
import pyarrow.parquet as pq
import pytest

from kernelzero.kit.codeblocks import answer, fenced_blocks
from kernelzero.kit.coder_prompts import render_coder_prompt

from kernelzero.analytics.projection import Projection
from kernelzero.analytics.replay import write_dataset
from kernelzero.analytics.views import install_views
from kernelzero.config import AnalyticsConfig

from tests.analytics.helpers import evaluation, module, records, sample

CONFIG = AnalyticsConfig()


def _events():
    events = [module("m1", ["x"], source="# module one"), module("m2", ["y"], source="# module two")]
    # m1: three correct kernels (1.0x, 2.0x, 1.02x) and one failure, then a correct repair (turn 1)
    for sid, verdict, speedup in (("k1", "correct", 1.0), ("k2", "correct", 2.0), ("k3", "correct", 1.02),
                                  ("k4", "incorrect", None)):
        events += [sample(sid, "m1"), evaluation(sid, "m1", ["x"], verdict, speedup=speedup)]
    events += [sample("r1", "m1", turn=1), evaluation("r1", "m1", ["x"], speedup=1.5, turn=1)]
    # m2: every sample passes, so its pass rate is above the band; nothing to compare for pref
    for sid in ("j1", "j2", "j3", "j4", "j5"):
        events += [sample(sid, "m2"), evaluation(sid, "m2", ["y"], speedup=1.5)]
    return events


@pytest.fixture
def con(tmp_path):
    with Projection(tmp_path / "a.duckdb") as projection:
        projection.apply(records(_events()))
        install_views(projection.con, CONFIG)
        yield projection.con


def _read(path):
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_sft_has_the_best_correct_kernel_per_module(con, tmp_path, suffix):
    path = tmp_path / f"sft{suffix}"
    assert write_dataset(con, CONFIG, "sft", path) == 2
    rows = {r["module_id"]: r for r in _read(path)}
    assert rows["m1"]["sample_id"] == "k2" and rows["m1"]["completion"] == answer("# kernel k2")
    assert fenced_blocks(rows["m1"]["completion"]) == [("python", "# kernel k2\n")]  # what the Coder's parser reads
    assert rows["m1"]["reference"] == "# module one" and rows["m1"]["speedup"] == 2.0
    assert rows["m2"]["reference"] == "# module two"
    # the prompt is exactly what the Coder is asked, for the kernel's backend
    assert rows["m1"]["prompt"] == render_coder_prompt("# module one", rows["m1"]["backend"], style="full")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_rl_prompts_are_the_modules_in_band(con, tmp_path, suffix):
    path = tmp_path / f"rl{suffix}"
    write_dataset(con, CONFIG, "rl", path)
    rows = _read(path)
    # m1: Beta(1 + 3, 1 + 1) mean 2/3 is in the band (the repair is not a first-shot pass); m2: Beta(6, 1) is not
    assert [r["module_id"] for r in rows] == ["m1"]
    assert rows[0]["prompt"] == "# module one" and rows[0]["pass_mean"] == pytest.approx(4 / 6)
    assert rows[0]["frontier_weight"] > 0


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_pref_pairs_prefer_the_faster_kernel(con, tmp_path, suffix):
    path = tmp_path / f"pref{suffix}"
    write_dataset(con, CONFIG, "pref", path, min_gain=0.05)
    pairs = sorted((r["chosen_sample"], r["rejected_sample"]) for r in _read(path))
    # 1.02x vs 1.0x is within the 5% noise margin: no pair; the repair r1 (1.5x) pairs as any kernel does
    assert pairs == [("k2", "k1"), ("k2", "k3"), ("k2", "r1"), ("r1", "k1"), ("r1", "k3")]
    assert all(fenced_blocks(r["chosen"]) and fenced_blocks(r["rejected"]) for r in _read(path))
    assert all(r["prompt"] == render_coder_prompt(r["reference"], r["backend"], style="full") for r in _read(path))
    assert all(r["chosen_speedup"] > r["rejected_speedup"] for r in _read(path))


def test_where_filters_and_bad_input_is_refused(con, tmp_path):
    assert write_dataset(con, CONFIG, "sft", tmp_path / "a.jsonl", where="module_id = 'm2'") == 1
    with pytest.raises(ValueError, match=".jsonl or .parquet"):
        write_dataset(con, CONFIG, "sft", tmp_path / "a.csv")
    with pytest.raises(ValueError, match="unknown dataset kind"):
        write_dataset(con, CONFIG, "dpo", tmp_path / "a.jsonl")
    with pytest.raises(duckdb.Error):
        write_dataset(con, CONFIG, "sft", tmp_path / "b.jsonl", where="no_such_column > 1")
    assert not (tmp_path / "b.jsonl").exists() and not list(tmp_path.glob(".*.partial"))


def test_sft_prompts_follow_the_coders_prompt_style(con, tmp_path):
    write_dataset(con, CONFIG, "sft", tmp_path / "compact.jsonl", prompt_style="compact")
    rows = {r["module_id"]: r for r in _read(tmp_path / "compact.jsonl")}
    assert rows["m1"]["prompt"] == render_coder_prompt("# module one", rows["m1"]["backend"], style="compact")
def test_a_module_the_evaluator_found_unusable_is_no_rl_prompt(tmp_path):
    events = _events() + [module("m3", ["z"], source="# constant module"), sample("u1", "m3"),
                          evaluation("u1", "m3", ["z"], "problem_error", reason="constant_output")]
    with Projection(tmp_path / "u.duckdb") as projection:
        projection.apply(records(events))
        install_views(projection.con, CONFIG)
        write_dataset(projection.con, CONFIG, "rl", tmp_path / "rl.jsonl")
    # untried, m3 would sit at the prior mean 1/2, inside the band
    assert [r["module_id"] for r in _read(tmp_path / "rl.jsonl")] == ["m1"]
