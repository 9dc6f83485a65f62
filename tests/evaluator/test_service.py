"""The evaluator service on an embedded log: samples.generated in, samples.evaluated out with the right verdicts."""

from __future__ import annotations

from pathlib import Path

import anyio

from kernelzero.config import Config, EvaluatorConfig, LogConfig
from kernelzero.gpu_workers.service import run_evaluator
from kernelzero.log import open_log
from kernelzero.schemas import SampleGenerated, decode, make_event
from kernelzero.stage import publish

HERE = Path(__file__).parent


def sample(sample_id: str, source: str | None, problem: str) -> SampleGenerated:
    return SampleGenerated(sample_id=sample_id, module_id="m1", backend="triton", source=source,
                           problem_source=problem, reason="" if source else "no_code", group_size=3,
                           group_index=int(sample_id[-1]), apis=["torch.relu"], level=2)


def test_service_evaluates_samples(tmp_path: Path) -> None:
    url = f"embedded:{tmp_path / 'log.sqlite'}"
    problem = (HERE / "problems" / "relu.py").read_text()
    samples = [sample("s0", (HERE / "candidates" / "correct_whole.py").read_text(), problem),
               sample("s1", (HERE / "candidates" / "passthrough_torch.py").read_text(), problem),
               sample("s2", None, problem)]
    config = Config(log=LogConfig(url=url),
                    evaluator=EvaluatorConfig(device="cpu", cache_dir=str(tmp_path / "cache"), timeout_s=60))

    async def scenario() -> dict[str, object]:
        log = await open_log(url)
        await publish(log, [make_event(s, correlation_id="m1", producer="test") for s in samples])
        await log.close()
        stats = await run_evaluator(config, idle_exit_s=1.0)
        assert stats.consumed == 3 and stats.produced == 3 and stats.dead_lettered == 0
        log = await open_log(url)
        out = {}
        async with await log.consumer("test-reader", ["samples.evaluated"]) as consumer:
            for _ in range(20):
                for record in await consumer.poll(max_records=10, timeout_s=0.5):
                    event = decode(record.value)
                    out[event.payload.sample_id] = (event.payload, event.envelope)
                if len(out) == 3:
                    break
        await log.close()
        return out

    out = anyio.run(scenario)
    verdicts = {k: (p.verdict, p.reason) for k, (p, _) in out.items()}
    assert verdicts == {"s0": ("correct", "ok"), "s1": ("rejected", "no_custom_kernel"),
                        "s2": ("compile_error", "no_code")}
    payload, envelope = out["s0"]
    assert payload.apis == ["torch.relu"] and payload.level == 2 and payload.group_size == 3
    assert payload.trials >= 6 and payload.device == "cpu" and envelope.correlation_id == "m1"


class _RecordingPool:
    """What EvaluatorStage asks of a pool, kept: which samples it wanted timed (CI has no GPU to time on)."""

    device_type, gpu, workers = "cuda", "NVIDIA H100 80GB HBM3", 1

    def __init__(self, time_heldout: bool):
        self.config = EvaluatorConfig(time_heldout=time_heldout)
        self.timed: dict[str, bool] = {}

    async def evaluate(self, problem_src: str, candidate_src: str, timed: bool = True):
        from kernelzero.gpu_workers.result import evaluation

        self.timed[candidate_src] = timed
        return evaluation("correct", "ok")


def test_heldout_samples_are_untimed_only_where_configured() -> None:
    from kernelzero.gpu_workers.service import EvaluatorStage

    def judged(time_heldout: bool) -> dict[str, bool]:
        pool = _RecordingPool(time_heldout)
        stage = EvaluatorStage(pool)
        for split in ("train", "heldout"):
            payload = SampleGenerated(sample_id=split, module_id="m1", backend="triton", source=f"# {split}",
                                      problem_source="# problem", split=split)
            anyio.run(stage.handle, make_event(payload, correlation_id="m1", producer="test"))
        return pool.timed

    assert judged(True) == {"# train": True, "# heldout": True}
    assert judged(False) == {"# train": True, "# heldout": False}  # training samples earn speed: always timed


def test_an_untimed_verdict_is_cached_apart_from_a_timed_one_on_a_gpu(tmp_path: Path) -> None:
    from kernelzero.gpu_workers import EvaluatorPool

    pool = EvaluatorPool(EvaluatorConfig(cache_dir=str(tmp_path)), device="cpu")
    problem, candidate = "# problem", "# candidate"
    pool.device_type = "cpu"  # nothing is timed on a CPU: one verdict either way
    assert pool._result_path(problem, candidate, timed=True) == pool._result_path(problem, candidate, timed=False)
    pool.device_type, pool.gpu = "cuda", "NVIDIA H100 80GB HBM3"
    assert pool._result_path(problem, candidate, timed=True) != pool._result_path(problem, candidate, timed=False)
