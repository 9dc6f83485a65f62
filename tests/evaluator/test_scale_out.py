"""Two evaluator worker processes in group "evaluator", one SIGKILLed mid-run: no sample lost (embedded log and Kafka).

Runs the real service on the CPU through bench/scale_out.py's harness, so the benchmark's own
counting is tested too. It shows nothing about GPUs: those runs are the benchmark's.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from kernelzero.gpu_workers.fleet import plan_workers, visible_gpus, worker_env
from kernelzero.log import WORK_TOPICS
from tests.log.conftest import kafka_broker  # noqa: F401  (the session fixture, used by the kafka case)

REPO = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_S = 2.0
SAMPLES = 64


def load_bench():
    spec = importlib.util.spec_from_file_location("scale_out_bench", REPO / "bench" / "scale_out.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # msgspec resolves the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


bench = load_bench()


@pytest.mark.parametrize("backend", ["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_a_killed_worker_loses_no_sample(backend: str, tmp_path: Path, request) -> None:
    broker = (f"embedded:{tmp_path / 'log.sqlite'}" if backend == "embedded"
              else f"kafka://{request.getfixturevalue('kafka_broker')}")
    candidates = bench.candidate_set("cpu")
    samples = bench.make_samples(candidates, SAMPLES, partitions=WORK_TOPICS["samples.generated"])
    env = bench.service_env("cpu", tmp_path / "cache", SESSION_TIMEOUT_S)
    kill = bench.Phase("killed", samples, lambda _elapsed, done: done >= SAMPLES // 4)
    expected = {c.name: c.expect for c in candidates}
    results = asyncio.run(bench.run_group(broker, 2, env, tmp_path, [kill], bench.Budget(90, 1), expected,
                                          SESSION_TIMEOUT_S))
    run = results["killed"]
    print(f"{backend}: lost {run.lost}, re-evaluated after the kill {run.re_evaluated_after_kill} "
          f"(all {run.re_evaluated}), taken over {run.taken_over}, "
          f"by worker {run.by_worker}")
    assert run.finished and run.lost == 0 and run.evaluated == SAMPLES
    assert run.unexpected == {}, run.unexpected
    assert run.killed_pid is not None and run.killed_evaluated >= 1
    assert run.restarts == 1, (tmp_path / "workers.log").read_text()[-3000:]
    if backend == "embedded":  # on Kafka the restarted worker may rejoin before the dead member is expired
        assert run.taken_over >= 1  # the survivor took over the dead worker's partitions before it came back
    killed_producer = [p for p in run.by_worker if p.endswith(f":{run.killed_pid}")]
    assert len(killed_producer) == 1 and run.by_worker[killed_producer[0]] < SAMPLES  # it died mid-run


def test_workers_follow_the_visible_gpus() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,1"}) == ["0"]  # CUDA stops at the first invalid entry
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert [s.gpu for s in plan_workers("auto", ["0", "1", "2"])] == ["0", "1", "2"]
    assert [s.gpu for s in plan_workers("auto", [])] == [None]
    assert [s.gpu for s in plan_workers("3", ["0", "1"])] == ["0", "1", "0"]
    with pytest.raises(ValueError, match="--workers"):
        plan_workers("0", ["0"])
    env = worker_env(plan_workers("2", ["7"])[1], base={"CUDA_VISIBLE_DEVICES": "7"})
    assert env["CUDA_VISIBLE_DEVICES"] == "7" and env["NCCL_NVLS_ENABLE"] == "0"
    assert worker_env(plan_workers("1", [])[0], base={})["CUDA_VISIBLE_DEVICES"] == ""
