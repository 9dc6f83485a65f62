"""EvaluatorPool on the CPU: result cache, a dead worker replaced (between jobs, and during one: that job is lost), unusable problems are problem_error results, the example passes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import EvaluatorPool

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def read(*parts: str) -> str:
    return Path(*parts).read_text()


def test_pool_lifecycle(tmp_path: Path) -> None:
    relu = read(HERE, "problems", "relu.py")
    good = read(HERE, "candidates", "correct_whole.py")
    config = EvaluatorConfig(cache_dir=str(tmp_path), timeout_s=60)

    async def scenario() -> None:
        async with EvaluatorPool(config, device="cpu") as pool:
            first = await pool.evaluate(relu, good)
            again = await pool.evaluate(relu, good)
            assert (first.verdict, first.cached) == ("correct", False)
            assert (again.verdict, again.cached) == ("correct", True)
            assert again.rel_err == first.rel_err

        async with EvaluatorPool(config, device="cpu", use_cache=False) as uncached:
            fresh = await uncached.evaluate(relu, good)  # the first pool's cached answer is not read
            assert (fresh.verdict, fresh.cached) == ("correct", False)
            results = sorted((tmp_path / "results").iterdir())
            await uncached.evaluate(relu, good + "\n# not written to the cache\n")
            assert sorted((tmp_path / "results").iterdir()) == results

        async with EvaluatorPool(config, device="cpu") as pool:
            server = pool._workers[0].server
            server.kill()  # the worker dies between jobs: replaced before the next one
            await asyncio.sleep(1)  # dead, not yet noticed
            between = await pool.evaluate(relu, good + "\n# another candidate\n")
            assert between.verdict == "correct"
            during = asyncio.create_task(pool.evaluate(relu, read(HERE, "candidates", "hang.py")))
            await asyncio.sleep(3)  # the job is running
            server.kill()  # the worker dies during a job: that job is lost, the worker replaced
            lost = await during
            assert (lost.verdict, lost.reason) == ("runtime_error", "worker_lost")
            after = await pool.evaluate(relu, good + "\n# a third candidate\n")
            assert after.verdict == "correct"

            for name, reason in [("broken_reference", "reference_failed"), ("nondeterministic", "non_deterministic"),
                                 ("constant", "constant_output"), ("clamp_saturated", "constant_output"),
                                 ("dropout", "non_deterministic"), ("reference_oom", "reference_out_of_memory")]:
                problem = read(HERE, "problems", f"{name}.py")
                bad = await pool.evaluate(problem, good)
                assert (bad.verdict, bad.reason, bad.cached) == ("problem_error", reason, False), bad.evidence
                assert bad.evidence["detail"] and bad.trials == 0
                known = await pool.evaluate(problem, good + "\n# another candidate of the same problem\n")
                assert (known.verdict, known.reason, known.cached) == ("problem_error", reason, True)  # no run

            example = await pool.evaluate(read(ROOT, "examples", "problems", "relu_matmul.py"),
                                          read(ROOT, "examples", "candidates", "relu_matmul_triton.py"))
            assert (example.verdict, example.reason) == ("correct", "ok")
            assert example.checks[:2] == ["static", "reference"] and "kernel_output_used" in example.checks
            assert example.runtime_ms is None and example.speedup is None  # CPU: no timing claims

    asyncio.run(scenario())


def test_workers_per_gpu_come_from_the_cards_memory_and_the_cores(monkeypatch) -> None:
    from kernelzero.gpu_workers.pool import workers_per_gpu

    gb = 2**30
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    auto = EvaluatorConfig()  # workers_per_gpu 0, 90% of the card
    assert workers_per_gpu(auto, 80 * gb, gpus=1) == 4  # an H100: 72 usable GB, 16 each
    assert workers_per_gpu(auto, 141 * gb, gpus=1) == 7  # an H200
    assert workers_per_gpu(auto, 141 * gb, gpus=4) == 3  # 15 spare cores over 4 cards
    assert workers_per_gpu(auto, 141 * gb, gpus=1, gpu_processes=3) == 2  # three processes share the card
    assert workers_per_gpu(auto, 8 * gb, gpus=1) == 1  # a small card still gets one
    assert workers_per_gpu(EvaluatorConfig(gpu_memory_cap_gb=40), 141 * gb, gpus=1) == 2  # planned as a 40 GB card
    assert workers_per_gpu(EvaluatorConfig(workers_per_gpu=6), 8 * gb, gpus=1) == 6  # as configured


def test_a_pool_of_several_cpu_workers_is_a_cpu_pool(tmp_path: Path) -> None:
    """With two CPU workers the pool once took itself for a GPU pool: its own verdicts said device cuda, and a
    candidate naming load_inline went to the CUDA build."""
    relu = read(HERE, "problems", "relu.py")
    static = read(HERE, "candidates", "background_thread.py")  # refused by the static rules, before any worker

    async def scenario():
        async with EvaluatorPool(EvaluatorConfig(cache_dir=str(tmp_path), cpu_workers=2), device="cpu") as pool:
            return pool.workers, await pool.evaluate(relu, static)

    workers, result = asyncio.run(scenario())
    assert workers == 2 and result.reason.startswith("static:") and result.device == "cpu"


def test_identical_evaluations_at_once_run_one_job(tmp_path: Path) -> None:
    """The same source judged several times at once (a group's repeated sample, a held-out measurement's) runs one
    job and the others get its cached verdict; a verdict that is not cached (a timeout) sends each to its own job;
    a pool without the result cache judges every one."""
    relu = read(HERE, "problems", "relu.py")
    good = read(HERE, "candidates", "correct_whole.py")
    hang = read(HERE, "candidates", "hang.py")

    async def scenario():
        config = EvaluatorConfig(cache_dir=str(tmp_path / "cached"), timeout_s=5, cpu_workers=2)
        async with EvaluatorPool(config, device="cpu") as pool:
            shared = await asyncio.gather(*(pool.evaluate(relu, good) for _ in range(3)))
            hung = await asyncio.gather(*(pool.evaluate(relu, hang) for _ in range(2)))
        config = EvaluatorConfig(cache_dir=str(tmp_path / "uncached"), timeout_s=5, cpu_workers=2)
        async with EvaluatorPool(config, device="cpu", use_cache=False) as pool:
            uncached = await asyncio.gather(*(pool.evaluate(relu, good) for _ in range(2)))
        return shared, hung, uncached

    shared, hung, uncached = asyncio.run(scenario())
    assert [r.verdict for r in shared] == ["correct"] * 3
    assert sorted(r.cached for r in shared) == [False, True, True]
    assert len(list((tmp_path / "cached" / "results").iterdir())) == 1
    assert [(r.verdict, r.cached) for r in hung] == [("timeout", False)] * 2
    assert [(r.verdict, r.cached) for r in uncached] == [("correct", False)] * 2
