"""`kernelzero demo` as a new user runs it, from zero on the CPU: the loop must learn, not only move events.

The whole demo (distil, tokenizer, from-scratch models, SFT, three rounds of the real loop), run
once with its defaults into a fresh cache; its summary (demo.json, the tables it prints) must show
correct and wrong training samples, groups with non-zero advantages, at least two policy versions
of each role, and the held-out modules measured at version 0 and at the end on at least 32 modules,
with the Coder solving some of them at version 0. Whether RL raises held-out pass@1 is the
experiment's question (kernelzero experiment, docs/BENCHMARKS.md), not this test's.
"""

from __future__ import annotations

import json

import pytest

from kernelzero.app.cli import main as cli_main


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a hang guard: from an empty evaluator cache on 2 cores the demo takes up to 15 min
def test_the_demo_from_zero_shows_both_learners_learning(tmp_path):
    assert cli_main(["demo", "--out", str(tmp_path / "run"), "--cache", str(tmp_path / "cache")]) == 0
    tables = json.loads((tmp_path / "run" / "demo.json").read_text())["tables"]
    verdicts = {row["verdict"] for row in tables["verdicts of training samples by Coder policy version"]}
    assert "correct" in verdicts and verdicts - {"correct"}, verdicts
    rewards = tables["rewards and advantages by Coder policy version"]
    assert any(row["informative"] > 0 and row["min_adv"] < 0 < row["max_adv"] for row in rewards), rewards
    published = tables["policy versions published"]
    versions = {row["role"]: row["versions"] for row in published}
    assert versions.get("coder", 0) >= 2 and versions.get("proposer", 0) >= 2, versions
    curve = tables["learning curve by Coder policy version (held-out modules are never trained on)"]
    measured = [row for row in curve if row["heldout_modules"]]
    assert len(measured) >= 2 and all(row["heldout_modules"] >= 32 for row in measured), curve
    assert measured[0]["policy_version"] == 0 and measured[0]["heldout_pass_at_1"] > 0, curve
    newest = {row["role"]: row["newest"] for row in published}["coder"]
    assert measured[-1]["policy_version"] == newest, curve  # the final measurement is of the newest Coder
    assert (tmp_path / "run" / "report" / "index.html").exists()
