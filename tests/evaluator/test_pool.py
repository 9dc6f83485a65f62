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
