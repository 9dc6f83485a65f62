"""The reference's times are measured once per problem, GPU and settings and shared; anything else measures again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import EvaluatorPool, zygote
from kernelzero.gpu_workers.reference_times import ReferenceTimes
from kernelzero.gpu_workers.result import evaluation
from kernelzero.gpu_workers.signed_cache import SignedFiles
from kernelzero.schemas.messages import Job, JobAnswer, ReferenceTiming

HERE = Path(__file__).parent
RELU = (HERE / "problems" / "relu.py").read_text()
H100 = "NVIDIA H100 80GB HBM3"


class Reference:
    """Stands in for the reference-only job: counts its runs, answers `times` after a pause (others wait meanwhile)."""

    def __init__(self, outcome: ReferenceTiming | object):
        self.outcome = outcome
        self.runs = 0

    async def __call__(self):
        self.runs += 1
        await asyncio.sleep(0.05)
        return self.outcome


def timing(ms: float) -> ReferenceTiming:
    return ReferenceTiming(eager_ms=ms, eager_iqr_ms=0.01, n=40, warmup_s=0.3)


def reference_key(problem: str = RELU, gpu: str = H100, **config) -> str:
    pool = EvaluatorPool(EvaluatorConfig(**config), device="cpu")
    pool.gpu = gpu  # known once a pool starts on a GPU
    return pool._reference_key(problem)


def store_and_key(tmp_path: Path) -> tuple[ReferenceTimes, str]:
    return ReferenceTimes(tmp_path, SignedFiles(tmp_path)), reference_key()


def test_the_key_is_the_problem_the_gpu_and_the_settings() -> None:
    key = reference_key()
    assert key == reference_key()
    assert key != reference_key(RELU + "\n# changed\n")
    assert key != reference_key(gpu="NVIDIA H200")
    assert key != reference_key(seed=1)  # other inputs
    assert key != reference_key(timing_budget_s=1.0)
    assert key == reference_key(workers_per_gpu=2)  # how many workers judge does not change the times


def test_a_group_waits_for_one_measurement_and_a_later_run_reads_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, key = store_and_key(tmp_path)
        measure = Reference(timing(0.25))
        answers = await asyncio.gather(*(store.get(key, measure) for _ in range(8)))
        assert measure.runs == 1
        assert answers == [timing(0.25)] * 8

        later = ReferenceTimes(tmp_path, SignedFiles(tmp_path))  # another pool, another run: read from disk
        again = Reference(timing(9.0))
        assert await later.get(key, again) == timing(0.25) and again.runs == 0

        changed = reference_key(RELU + "\n# changed\n")
        assert await later.get(changed, again) == timing(9.0) and again.runs == 1

    asyncio.run(scenario())


def test_a_failure_reaches_every_waiter_and_is_not_kept(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, key = store_and_key(tmp_path)
        failed = Reference(evaluation("timeout", "timeout"))
        answers = await asyncio.gather(*(store.get(key, failed) for _ in range(4)))
        assert failed.runs == 1 and {a.verdict for a in answers} == {"timeout"}
        assert not (tmp_path / "references").exists() or not any((tmp_path / "references").iterdir())
        good = Reference(timing(0.5))
        assert await store.get(key, good) == timing(0.5) and good.runs == 1

    asyncio.run(scenario())


def test_a_changed_or_unsigned_file_is_measured_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, key = store_and_key(tmp_path)
        await store.get(key, Reference(timing(0.25)))
        path = tmp_path / "references" / f"{key}.json"
        mac, _, payload = path.read_bytes().partition(b"\n")
        path.write_bytes(mac + b"\n" + payload.replace(b"0.25", b"250.0"))  # a slow reference: every speedup 1000x
        remeasured = Reference(timing(0.26))
        assert await ReferenceTimes(tmp_path, SignedFiles(tmp_path)).get(key, remeasured) == timing(0.26)
        assert remeasured.runs == 1

        path.write_bytes(msgspec.json.encode(timing(250.0)))
        unsigned = Reference(timing(0.27))
        assert await ReferenceTimes(tmp_path, SignedFiles(tmp_path)).get(key, unsigned) == timing(0.27)

    asyncio.run(scenario())


def test_without_the_disk_nothing_is_written(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = ReferenceTimes(tmp_path, SignedFiles(tmp_path), use_disk=False)
        await store.get(reference_key(), Reference(timing(0.25)))
        assert not (tmp_path / "references").exists()

    asyncio.run(scenario())


def test_a_reference_only_job_never_imports_the_candidate(tmp_path: Path) -> None:
    """The times it answers are shared with every sample: no candidate code may run in the process that measures them."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    job = Job(problem_src=RELU, candidate_src="import os\nos._exit(3)\n", device="cpu", scratch_dir=str(scratch),
              config=EvaluatorConfig(device="cpu", timeout_s=60), reference_only=True)
    answer = msgspec.msgpack.decode(zygote.run_forked(job), type=JobAnswer)
    assert (answer.result.verdict, answer.result.reason) == ("correct", "ok")
    assert "import" not in answer.result.checks
    assert not (scratch / "kz_candidate.py").exists()
