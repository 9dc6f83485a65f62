"""Candidates that leave lying files where the evaluator reads (links, hard links, FIFOs, sockets, device nodes, a file flipped under it, output that keeps growing, folders nested thousands deep; in a scratch or a build folder; a build's output without end), in bubblewrap on the CPU: no host file's content comes back, every lie is the candidate's verdict within its timeout, and the worker goes on.

The targets (a root-only secret bound read-only into the sandbox, host files never bound, /etc/shadow)
are tests/sandbox_targets.py's. Needs bubblewrap; GPUs are not covered here (bench/eval_gpu_corpus.py
runs the lie_* candidates contained on a GPU).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import resource
import time
from pathlib import Path

import msgspec
import pytest

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import EvaluatorPool
from kernelzero.sandbox import untrusted_files
from kernelzero.sandbox.launcher import find_bwrap
from tests import sandbox_targets
from tests.sandbox_targets import CANDIDATES, LIES, SECRET_DIR, VICTIM

HERE = Path(__file__).parent
RELU = (HERE / "problems" / "relu.py").read_text()
CORRECT = (HERE / "candidates" / "correct_whole.py").read_text()
SLACK_S = 10.0  # a verdict within its timeout plus this: starting the job, killing what it left, answering

pytestmark = pytest.mark.skipif(find_bwrap("") is None,
                                reason="bubblewrap (bwrap) not found: scripts/setup.sh installs it when run as root")


def header(name: str) -> dict[str, str]:
    return dict(re.findall(r"^# (expect|problem|config|via): (.+)$", (CANDIDATES / f"{name}.py").read_text(), re.M))


def expected(name: str) -> tuple[str, str]:
    verdict, reason = header(name)["expect"].split()
    return verdict, reason


def config_for(name: str, cache_dir: Path) -> EvaluatorConfig:
    """The candidate's `# config:` line, with the secret's folder bound read-only into the sandbox (it can name it)."""
    values = dict(kv.split("=") for kv in header(name).get("config", "").split(",") if kv)
    return msgspec.convert({"cache_dir": str(cache_dir), "sandbox_binds": [str(SECRET_DIR)], **values},
                           EvaluatorConfig, strict=False)


@dataclasses.dataclass
class Judged:
    timeout_s: float  # every lie's, from their shared `# config:` line
    results: dict[str, tuple[object, float]]  # lie -> (its result, seconds it took)
    next_job: object  # a correct candidate's result on the same pool, after every lie
    same_worker: bool  # the worker that judged the first lie judged the next job
    stderr: str  # what the pool and its worker wrote to stderr meanwhile


@pytest.fixture(scope="module")
def judged(lie_targets, tmp_path_factory) -> Judged:
    """Every lie_* candidate through one pool (they share one `# config:` line), then a correct candidate."""
    folder = tmp_path_factory.mktemp("lying")
    config = config_for(LIES[0], folder / "cache")
    assert all(header(name)["config"] == header(LIES[0])["config"] for name in LIES)

    async def run() -> Judged:
        async with EvaluatorPool(config, device="cpu", use_cache=False) as pool:
            worker = pool._workers[0].server.pid
            results = {}
            for name in LIES:
                started = time.monotonic()
                result = await pool.evaluate(RELU, (CANDIDATES / f"{name}.py").read_text())
                results[name] = (result, time.monotonic() - started)
            next_job = await pool.evaluate(RELU, CORRECT)
            return Judged(config.timeout_s, results, next_job, pool._workers[0].server.pid == worker, "")

    with sandbox_targets.stderr_into(folder / "stderr.log"):
        out = asyncio.run(run())
    out.stderr = (folder / "stderr.log").read_text(errors="replace")
    return out


@pytest.mark.parametrize("name", LIES)
def test_a_lie_is_the_candidates_verdict_within_its_timeout(judged, name: str) -> None:
    result, seconds = judged.results[name]
    assert (result.verdict, result.reason) == expected(name), result.evidence
    assert result.evidence["sandbox"].startswith("bwrap ")
    assert seconds <= judged.timeout_s + SLACK_S


@pytest.mark.parametrize("name", LIES)
def test_a_lie_brings_no_host_file_into_the_verdict(judged, lie_targets, name: str) -> None:
    result, _ = judged.results[name]
    assert lie_targets.leaked(msgspec.json.encode(result).decode()) == [], result.evidence


def test_no_host_file_reaches_the_evaluators_own_output(judged, lie_targets) -> None:
    assert lie_targets.leaked(judged.stderr) == []


def test_the_worker_judges_the_next_job_after_every_lie(judged) -> None:
    assert judged.same_worker  # never lost, never replaced
    assert (judged.next_job.verdict, judged.next_job.reason) == ("correct", "ok"), judged.next_job.evidence


def test_the_kernel_refuses_a_hard_link_to_a_host_file(judged) -> None:
    output = judged.results["lie_hard_link"][0].evidence["output"]  # printed into the log the server holds open
    for target in ("/tmp/kz_lying_files/secret", "/etc/shadow"):  # another mount: bubblewrap binds it
        assert f"link {target}: Invalid cross-device link" in output, output


def test_the_kernel_refuses_a_device_node(judged) -> None:
    output = judged.results["lie_device_node"][0].evidence["output"]
    assert "mknod /dev/mem: Operation not permitted" in output, output


def test_a_growing_output_is_read_bounded_and_its_writer_does_not_outlive_the_job(judged) -> None:
    output = judged.results["lie_grows"][0].evidence["output"]
    assert "kz-grows" in output and len(output) <= 1500  # the tail of the file the server opened, not the path's
    assert sandbox_targets.processes_named("kz-lying-grows") == []


def build_then_run(name: str, cache_dir: Path):
    """A candidate through the CUDA path's build process, twice, then a job and a correct candidate, on the CPU.

    (first build's failure or None, second build's failure or None, the job's result or None, the correct one's).
    """
    source = (CANDIDATES / f"{name}.py").read_text()

    async def run():
        config = EvaluatorConfig(cache_dir=str(cache_dir), static_checks=False, timeout_s=60,
                                 sandbox_binds=[str(SECRET_DIR)])
        async with EvaluatorPool(config, device="cpu", use_cache=False) as pool:
            first = await pool._build(source)
            second = await pool._build(source)  # a failed build is built again: its folder is reused
            ext_dir, built, _, failure = second
            job = None if failure is not None else await pool._run(RELU, source, ext_dir, built)
            return first[3], failure, job, await pool.evaluate(RELU, CORRECT)

    return asyncio.run(run())


def test_a_build_folders_lies_stay_out_of_the_jobs_copy(lie_targets, tmp_path: Path) -> None:
    _, failure, result, next_job = build_then_run("build_leaves_lies", tmp_path)
    assert failure is None
    assert (result.verdict, result.reason) == expected("build_leaves_lies"), result.evidence
    error = result.evidence["error"]
    assert "holds build_report.txt:file, kz_candidate.py:file;" in error  # no link, FIFO, socket, hard-linked file
    for target in ("/tmp/kz_lying_files/secret", "/etc/shadow"):
        assert f"link {target}: Invalid cross-device link" in error, error
    assert "mknod /dev/mem: Operation not permitted" in error
    assert lie_targets.leaked(msgspec.json.encode(result).decode()) == []
    assert (next_job.verdict, next_job.reason) == ("correct", "ok"), next_job.evidence


def test_a_link_planted_in_a_failed_build_is_not_written_through(lie_targets, tmp_path: Path) -> None:
    first, second, _, next_job = build_then_run("build_plants_link", tmp_path)
    for failure in (first, second):
        assert (failure.verdict, failure.reason) == expected("build_plants_link"), failure.evidence
    assert VICTIM.read_text() == lie_targets.victim  # the second build's source went to the build folder, not the link
    assert lie_targets.leaked(msgspec.json.encode(second).decode()) == []
    assert (next_job.verdict, next_job.reason) == ("correct", "ok"), next_job.evidence


def test_a_failed_builds_deep_folders_do_not_stop_the_next_build(tmp_path: Path) -> None:
    try:
        first, second, _, next_job = build_then_run("build_nests_deep", tmp_path)
    finally:
        untrusted_files.remove_tree(str(tmp_path / "builds"))  # pytest's own removal (shutil.rmtree) recurses
    for failure in (first, second):
        assert (failure.verdict, failure.reason) == expected("build_nests_deep"), failure.evidence
    assert (next_job.verdict, next_job.reason) == ("correct", "ok"), next_job.evidence


def test_a_build_that_floods_its_output_does_not_fill_the_pools_memory(tmp_path: Path) -> None:
    import torch  # noqa: F401  (the pool imports it: imported first, only the build's output can raise the peak)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    first, _, result, _ = build_then_run("build_floods_output", tmp_path)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_kib) / 1024
    assert first is None  # its own line was found after 512 MiB of output
    assert (result.verdict, result.reason) == expected("build_floods_output"), result.evidence
    assert grown_mib < 128, f"the pool's peak memory grew {grown_mib:.0f} MiB"


def test_no_host_file_reaches_the_event_log(lie_targets, tmp_path: Path) -> None:
    """The evaluator service on an embedded log: what the lies' verdicts became there holds no planted file."""
    import anyio

    from kernelzero.config import Config, LogConfig
    from kernelzero.gpu_workers.service import run_evaluator
    from kernelzero.log import open_log
    from kernelzero.schemas import SampleGenerated, make_event
    from kernelzero.stage import publish

    lies = ["lie_link_root_only", "lie_link_shadow", "lie_flips"]
    url = f"embedded:{tmp_path / 'log.sqlite'}"
    samples = [SampleGenerated(sample_id=name, module_id="m1", backend="triton", source=(CANDIDATES / f"{name}.py")
                               .read_text(), problem_source=RELU, group_size=len(lies), group_index=i)
               for i, name in enumerate(lies)]
    config = Config(log=LogConfig(url=url), evaluator=config_for(lies[0], tmp_path / "cache"))

    async def serve():
        log = await open_log(url)
        await publish(log, [make_event(s, correlation_id="m1", producer="test") for s in samples])
        await log.close()
        return await run_evaluator(config, idle_exit_s=1.0, device="cpu", use_cache=False)

    stats = anyio.run(serve)
    assert (stats.produced, stats.dead_lettered) == (len(lies), 0)
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("log.sqlite*")).decode("latin-1")
    assert "worker_exited:7" in stored and "timeout" in stored  # the verdicts are there, as written
    assert lie_targets.leaked(stored) == []
