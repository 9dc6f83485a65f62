"""`kernelzero demo` as a new user runs it, from zero on the CPU: the loop must learn, not only move events.

The whole demo (distil, tokenizer, from-scratch models, SFT, three rounds of the real loop), run
once with its defaults into a fresh cache, killed (its whole process group) a few seconds into its
second round and then given the same command again, which continues it; the finished run must hold
each held-out module once and show, in its summary (demo.json, the tables it prints),
correct and wrong training samples, groups with non-zero advantages, at least two policy versions
of each role, and the held-out modules measured at version 0 and at the end on at least 32 modules,
with the Coder solving some of them at version 0. Whether RL raises held-out pass@1 is the
experiment's question (kernelzero experiment, docs/BENCHMARKS.md), not this test's.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import anyio
import pytest

from kernelzero.app.cli import main as cli_main


def killed_in_round_two(command: list[str], steps: "os.PathLike") -> None:
    """`command` started in a session of its own and killed with all its processes a few seconds after
    `steps` says round 1 finished (fails if it ends before that)."""
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        while not (os.path.exists(steps) and "round 1" in json.loads(open(steps).read())):
            assert process.poll() is None, f"the demo ended ({process.returncode}) before its first round did"
            time.sleep(1)
        time.sleep(5)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def heldout_ids(log_url: str) -> collections.Counter:
    from kernelzero.log import open_log
    from kernelzero.schemas import ModuleAccepted
    from kernelzero.stage import read_payloads

    async def read() -> list:
        async with await open_log(log_url, create=False) as log:
            return await read_payloads(log, "modules.accepted", ModuleAccepted, reader="test")

    return collections.Counter(m.module_id for m in anyio.run(read) if m.split == "heldout")


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a hang guard: from an empty evaluator cache on 2 cores the demo takes up to 15 min
def test_the_demo_from_zero_shows_both_learners_learning(tmp_path):
    options = ["demo", "--out", str(tmp_path / "run"), "--cache", str(tmp_path / "cache")]
    killed_in_round_two([sys.executable, "-m", "kernelzero", *options], tmp_path / "run" / "steps.json")
    assert "round 2" not in json.loads((tmp_path / "run" / "steps.json").read_text())
    assert cli_main(options) == 0
    ids = heldout_ids(f"embedded:{tmp_path / 'run' / 'log.sqlite'}")
    assert ids and set(ids.values()) == {1}, [i for i, n in ids.items() if n > 1][:5]  # none published twice
    tables = json.loads((tmp_path / "run" / "demo.json").read_text())["tables"]
    verdicts = {row["verdict"] for row in tables["verdicts of training samples by Coder policy version"]}
    assert "correct" in verdicts and verdicts - {"correct"}, verdicts
    rewards = tables["rewards and advantages by Coder policy version"]
    assert any(row["informative"] > 0 and row["min_adv"] < 0 < row["max_adv"] for row in rewards), rewards
    outcomes = tables["the Proposer's modules by its policy version (rejected: the validator's reason)"]
    assert any(row["outcome"] == "accepted" for row in outcomes), outcomes  # the loop is fed, not starved
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
