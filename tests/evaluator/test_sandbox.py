"""Attack candidates (Python, C++; run and build) against the real sandbox: each fails, nothing outside changes, verdicts say why.

Every candidate in candidates_sandbox/ but the lying-file ones (lie_*, build_leaves_lies, build_plants_link:
test_lying_files.py) aims at fixed targets this module sets up: files under
/tmp/kz_sandbox_test (a secret in a "home", a log file), /tmp/kz_pwned*, the cache folder
reached from the scratch folder, a TCP port and an abstract unix socket listening here, and the
host's process table. Needs bubblewrap (scripts/setup.sh installs it as root); does not cover GPUs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shutil
import socket
from pathlib import Path

import msgspec
import pytest

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import EvaluatorPool
from kernelzero.sandbox import confine
from kernelzero.sandbox.launcher import find_bwrap
from tests.sandbox_targets import processes_named

HERE = Path(__file__).parent
CANDIDATES = HERE / "candidates_sandbox"
RELU = (HERE / "problems" / "relu.py").read_text()
TARGETS = Path("/tmp/kz_sandbox_test")
SECRET_VALUE = "kz-secret-value-7f3a"
LOG_BYTES = b"SQLite format 3\x00 stands for the event log"
PWNED = [Path("/tmp/kz_pwned"), Path("/tmp/kz_pwned_cpp"), Path("/tmp/kz_pwned_build")]
TCP_PORT = 47319
ABSTRACT_NAME = b"\0kz_sandbox_test"
SECRET_ENV = ("KZ_TEST_SECRET_TOKEN", "TORCH_KZ_TEST_SECRET")  # one outside the allowed names, one inside a prefix

pytestmark = pytest.mark.skipif(find_bwrap("") is None,
                                reason="bubblewrap (bwrap) not found: scripts/setup.sh installs it when run as root")


@dataclasses.dataclass
class Targets:
    tcp: socket.socket
    unix: socket.socket


@pytest.fixture(scope="module")
def targets():
    shutil.rmtree(TARGETS, ignore_errors=True)
    (TARGETS / "home").mkdir(parents=True)
    (TARGETS / "home" / ".secret").write_text(SECRET_VALUE)
    (TARGETS / "log.sqlite").write_bytes(LOG_BYTES)
    for path in PWNED:
        path.unlink(missing_ok=True)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("127.0.0.1", TCP_PORT))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(ABSTRACT_NAME)
    for listener in (tcp, unix):
        listener.listen(16)
        listener.setblocking(False)
    os.environ.update({name: SECRET_VALUE for name in SECRET_ENV})
    try:
        yield Targets(tcp=tcp, unix=unix)
    finally:
        for name in SECRET_ENV:
            os.environ.pop(name, None)
        tcp.close()
        unix.close()
        shutil.rmtree(TARGETS, ignore_errors=True)


def header(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^# (expect|problem|config|via): (.+)$", path.read_text(), re.M))


def config_for(path: Path, cache_dir: Path) -> EvaluatorConfig:
    values = dict(kv.split("=") for kv in header(path).get("config", "").split(",") if kv)
    return msgspec.convert({"cache_dir": str(cache_dir), **values}, EvaluatorConfig, strict=False)


def evaluate_all(names: list[str], cache_dir: Path) -> dict[str, object]:
    """Evaluate candidates sharing one `# config:` line through one pool on the CPU."""
    paths = [CANDIDATES / f"{name}.py" for name in names]

    async def run() -> dict[str, object]:
        async with EvaluatorPool(config_for(paths[0], cache_dir), device="cpu", use_cache=False) as pool:
            return {p.stem: await pool.evaluate(RELU, p.read_text()) for p in paths}

    return asyncio.run(run())


def nothing_arrived(listener: socket.socket) -> bool:
    try:
        connection, _ = listener.accept()
    except BlockingIOError:
        return True
    connection.close()
    return False


def cache_entries(cache_dir: Path) -> list[str]:
    return sorted(p.name for p in (cache_dir / "results").iterdir())


def assert_nothing_changed(targets: Targets, cache_dir: Path) -> None:
    assert [p for p in PWNED if p.exists()] == []
    assert (TARGETS / "log.sqlite").read_bytes() == LOG_BYTES
    assert [p.name for p in cache_dir.rglob("kz_pwned*")] == []
    assert nothing_arrived(targets.tcp) and nothing_arrived(targets.unix)


def expected(name: str) -> tuple[str, str]:
    verdict, reason = header(CANDIDATES / f"{name}.py")["expect"].split()
    return verdict, reason


PYTHON_ATTACKS = ["write_outside", "read_outside", "connect_local", "outlive_timeout", "fork_bomb"]


@pytest.fixture(scope="module")
def python_results(targets, tmp_path_factory):
    cache_dir = tmp_path_factory.mktemp("sandboxcache")
    return cache_dir, evaluate_all(PYTHON_ATTACKS, cache_dir)


@pytest.mark.parametrize("name", PYTHON_ATTACKS)
def test_python_attack_gets_its_verdict_and_names_the_containment(python_results, name: str) -> None:
    result = python_results[1][name]
    assert (result.verdict, result.reason) == expected(name), result.evidence
    in_force = result.evidence["sandbox"]
    assert in_force.startswith("bwrap ") and not confine.missing(confine.REQUIRED, in_force.split(": ")[1].split(","))


def test_python_writes_outside_scratch_fail(python_results, targets) -> None:
    cache_dir, results = python_results
    error = results["write_outside"].evidence["error"]
    assert "WRITTEN" not in error
    for target in ("/tmp/kz_pwned", "/tmp/kz_sandbox_test/log.sqlite", "results/kz_pwned.json", "cache.key"):
        assert re.search(re.escape(target) + r": (Permission denied|Read-only file system|No such file)", error), error
    assert_nothing_changed(targets, cache_dir)


def test_python_reads_outside_scratch_find_nothing(python_results) -> None:
    result = python_results[1]["read_outside"]
    assert SECRET_VALUE not in str(result.evidence)
    assert "/tmp/kz_sandbox_test/home/.secret: No such file or directory" in result.evidence["error"]
    assert "environment: no secret" in result.evidence["error"]


def test_python_connections_to_this_host_fail(python_results, targets) -> None:
    error = python_results[1]["connect_local"].evidence["error"]
    assert f"tcp 127.0.0.1:{TCP_PORT}: Operation not permitted" in error  # seccomp: no network socket at all
    assert "abstract unix: Connection refused" in error  # another network namespace: the name is not there
    assert nothing_arrived(targets.tcp) and nothing_arrived(targets.unix)


def test_python_process_left_behind_is_killed_with_the_job(python_results) -> None:
    assert python_results[1]["outlive_timeout"].verdict == "timeout"
    assert processes_named("kz-outlive-python") == []


def test_python_fork_bomb_is_refused_at_the_process_limit(python_results) -> None:
    error = python_results[1]["fork_bomb"].evidence["error"]
    children = re.search(r"fork refused after (\d+) children: Resource temporarily unavailable", error)
    assert children and int(children.group(1)) < 64, error


@pytest.mark.slow
def test_cpp_attacks_fail_and_report_why(targets, tmp_path: Path) -> None:
    result = evaluate_all(["cpp_attacks"], tmp_path)["cpp_attacks"]
    assert (result.verdict, result.reason) == expected("cpp_attacks"), result.evidence
    error = result.evidence["error"]
    assert "write /tmp/kz_pwned_cpp: Permission denied" in error
    assert "read /tmp/kz_sandbox_test/home/.secret: No such file or directory" in error
    assert f"connect 127.0.0.1:{TCP_PORT}: Operation not permitted" in error
    assert "detached process: STARTED" in error  # it started, and did not outlive the job:
    assert processes_named("kz-outlive-cpp") == []
    children = re.search(r"fork: (\d+) children, then Resource temporarily unavailable", error)
    assert children and int(children.group(1)) < 64, error
    assert SECRET_VALUE not in str(result.evidence)
    assert_nothing_changed(targets, tmp_path)


def build_then_run(name: str, cache_dir: Path):
    """A candidate through the CUDA path's build process and then a job, on the CPU: (build failure or None, result)."""
    source = (CANDIDATES / f"{name}.py").read_text()

    async def run():
        config = EvaluatorConfig(cache_dir=str(cache_dir), static_checks=False, timeout_s=600)
        async with EvaluatorPool(config, device="cpu", use_cache=False) as pool:
            ext_dir, built, _, failure = await pool._build(source)
            if failure is not None:
                return failure, None
            return None, await pool._run(RELU, source, ext_dir, built)

    return asyncio.run(run())


@pytest.mark.slow
def test_a_contained_build_loads_in_a_contained_job_without_rebuilding(tmp_path: Path) -> None:
    failure, result = build_then_run("build_cpp", tmp_path)
    assert failure is None
    assert (result.verdict, result.reason) == expected("build_cpp"), result.evidence  # the CPU path sees no C++ kernel
    assert result.trials >= 6 and result.rel_err == 0.0  # it ran, from the build's copy, and computed relu


@pytest.mark.slow
def test_build_time_attacks_fail_and_report_why(targets, tmp_path: Path) -> None:
    failure, _ = build_then_run("build_attacks", tmp_path)
    assert (failure.verdict, failure.reason) == expected("build_attacks"), failure.evidence
    error, log = failure.evidence["error"], failure.evidence["log"]
    assert "write /tmp/kz_pwned_build: Permission denied" in error
    assert "write ../../results/kz_pwned.json: No such file or directory" in error
    assert "read /tmp/kz_sandbox_test/home/.secret: No such file or directory" in error
    assert "connect: Operation not permitted" in error
    assert "/tmp/kz_sandbox_test/home/.secret: No such file or directory" in log  # the compiler could not reach it
    assert SECRET_VALUE not in error + log
    assert failure.evidence["sandbox"].startswith("bwrap ")
    assert_nothing_changed(targets, tmp_path)
