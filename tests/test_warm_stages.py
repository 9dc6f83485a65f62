"""Stages kept open between the rounds of a run: the evaluator's contained workers start once, serve every round, and
are gone when the run ends; a stage that is not kept runs as `serve_until_idle` runs it."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from kernelzero.app.warm_stages import WarmStages
from kernelzero.config import Config, EvaluatorConfig, LogConfig
from kernelzero.log import LogError, open_log
from kernelzero.schemas import SampleEvaluated, decode, make_event
from kernelzero.stage import publish_to
from tests.evaluator.test_service import HERE, sample


def fork_servers() -> set[int]:
    """The evaluator's fork servers running now: processes whose command line names the zygote, less the jobs they
    fork (whose parent is one)."""
    parents = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"kernelzero.gpu_workers.zygote" in (proc / "cmdline").read_bytes():
                status = (proc / "status").read_text()
                parents[int(proc.name)] = int(status.split("PPid:")[1].split()[0])
        except OSError:
            continue
    return {pid for pid, parent in parents.items() if parent not in parents}


def verdicts(url: str) -> dict[str, str]:
    async def read() -> dict[str, str]:
        out = {}
        async with await open_log(url) as log, await log.consumer("test-reader", ["samples.evaluated"]) as consumer:
            while records := await consumer.poll(max_records=64, timeout_s=0.5):
                for record in records:
                    payload = decode(record.value).payload
                    if isinstance(payload, SampleEvaluated):
                        out[payload.sample_id] = payload.verdict
        return out

    return anyio.run(read)


def test_the_evaluator_kept_open_serves_two_rounds_with_the_workers_it_started_once(tmp_path):
    url = f"embedded:{tmp_path / 'log.sqlite'}"
    problem = (HERE / "problems" / "relu.py").read_text()
    correct = (HERE / "candidates" / "correct_whole.py").read_text()
    config = Config(log=LogConfig(url=url), evaluator=EvaluatorConfig(device="cpu", cpu_workers=1,
                                                                     cache_dir=str(tmp_path / "cache"), timeout_s=60))
    before = fork_servers()
    with WarmStages(config) as stages:
        publish_to(url, [make_event(sample("s0", correct, problem), correlation_id="m1", producer="test")])
        assert stages.run("evaluator") == 0
        workers = fork_servers() - before
        publish_to(url, [make_event(sample("s1", None, problem), correlation_id="m1", producer="test")])
        assert stages.run("evaluator") == 0
        assert stages.run("projector") == 0  # not kept: started and stopped here
        assert workers and fork_servers() - before == workers
    assert verdicts(url) == {"s0": "correct", "s1": "compile_error"}
    assert not fork_servers() & workers, "the kept workers outlived the run"


def test_a_stage_opened_soon_starts_its_workers_before_its_first_run_and_serves_it_with_them(tmp_path):
    url = f"embedded:{tmp_path / 'log.sqlite'}"
    problem = (HERE / "problems" / "relu.py").read_text()
    config = Config(log=LogConfig(url=url), evaluator=EvaluatorConfig(device="cpu", cpu_workers=1,
                                                                     cache_dir=str(tmp_path / "cache"), timeout_s=60))
    before = fork_servers()
    with WarmStages(config) as stages:
        stages.open_soon("evaluator")
        stages.open_soon("evaluator")
        deadline = time.monotonic() + 120
        while not fork_servers() - before and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = fork_servers() - before
        assert len(workers) == 1, "open_soon started no worker, or a second stage"
        publish_to(url, [make_event(sample("s0", None, problem), correlation_id="m1", producer="test")])
        assert stages.run("evaluator") == 0
        assert fork_servers() - before == workers
    assert verdicts(url) == {"s0": "compile_error"}


def test_a_kept_stage_that_cannot_open_fails_its_run_instead_of_waiting_on_it():
    config = Config(log=LogConfig(url="nowhere:log"), evaluator=EvaluatorConfig(device="cpu", cpu_workers=1))
    with pytest.raises(LogError, match="unknown broker URL"):
        with WarmStages(config) as stages:
            stages.open_soon("validator")
            stages.run("validator")
