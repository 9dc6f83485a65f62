"""`require_sandbox`: refused, naming what is missing, without bubblewrap or one of its mechanisms; else what holds is in evidence."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kernelzero.config import ConfigError, EvaluatorConfig, load_config
from kernelzero.gpu_workers import EvaluatorPool
from kernelzero.sandbox.launcher import SandboxUnavailable, find_bwrap

HERE = Path(__file__).parent
RELU = (HERE / "problems" / "relu.py").read_text()
GOOD = (HERE / "candidates" / "correct_whole.py").read_text()
needs_bwrap = pytest.mark.skipif(find_bwrap("") is None,
                                 reason="bubblewrap (bwrap) not found: scripts/setup.sh installs it when run as root")


def first_result(config: EvaluatorConfig):
    async def run():
        async with EvaluatorPool(config, device="cpu", use_cache=False) as pool:
            return await pool.evaluate(RELU, GOOD)

    return asyncio.run(run())


def bwrap_without(tmp_path: Path, option: str) -> str:
    """bubblewrap that leaves out one option, as on a kernel that refused that namespace."""
    wrapper = tmp_path / "bwrap-without"
    wrapper.write_text("#!/bin/sh\n"
                       f'for arg do shift; [ "$arg" = "{option}" ] || set -- "$@" "$arg"; done\n'
                       f'exec {find_bwrap("")} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_required_but_no_bubblewrap_is_refused_before_any_worker_starts(tmp_path: Path) -> None:
    config = EvaluatorConfig(cache_dir=str(tmp_path), bwrap=str(tmp_path / "no-such-bwrap"), require_sandbox=True)
    with pytest.raises(SandboxUnavailable, match="require_sandbox = true, but bubblewrap was not found"):
        first_result(config)
    assert list((tmp_path / "scratch").iterdir()) == []


@needs_bwrap
def test_a_missing_mechanism_is_named_and_refused(tmp_path: Path) -> None:
    config = EvaluatorConfig(cache_dir=str(tmp_path), bwrap=bwrap_without(tmp_path, "--unshare-net"))
    with pytest.raises(SandboxUnavailable) as refused:
        first_result(config)
    message = str(refused.value)
    assert "require_sandbox = auto requires it" in message
    assert "without: net (its own network namespace" in message and "require_sandbox = false" in message


@needs_bwrap
def test_not_required_it_evaluates_and_evidence_says_what_held(tmp_path: Path) -> None:
    config = EvaluatorConfig(cache_dir=str(tmp_path), bwrap=bwrap_without(tmp_path, "--unshare-net"),
                             require_sandbox=False)
    result = first_result(config)
    assert result.verdict == "correct"
    held = result.evidence["sandbox"].split(": ")[1].split(",")
    assert "net" not in held and {"mount", "pid", "seccomp", "nproc", "nofile"} <= set(held)


def test_sandbox_off_is_explicit_and_said_in_evidence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sandbox` = false needs require_sandbox = false"):
        load_config(env={"KERNELZERO_EVALUATOR_SANDBOX": "false"})
    result = first_result(EvaluatorConfig(cache_dir=str(tmp_path), sandbox=False, require_sandbox=False))
    assert (result.verdict, result.evidence["sandbox"]) == ("correct", "off")


@needs_bwrap
def test_auto_with_bubblewrap_requires_and_names_every_mechanism(tmp_path: Path) -> None:
    result = first_result(EvaluatorConfig(cache_dir=str(tmp_path)))
    launcher, held = result.evidence["sandbox"].split(": ")
    assert launcher.startswith("bwrap ")
    assert {"net", "mount", "pid", "seccomp", "nproc", "nofile", "env"} <= set(held.split(","))


def bwrap_that_cannot_start(tmp_path: Path) -> str:
    """bubblewrap as on a kernel that refuses it user namespaces: its version, then its error for anything else."""
    fake = tmp_path / "bwrap-refused"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }\n'
                    'echo "bwrap: No permissions to create a new namespace" >&2\nexit 1\n')
    fake.chmod(0o755)
    return str(fake)


def test_a_bwrap_that_cannot_start_is_refused_with_its_message(tmp_path: Path) -> None:
    config = EvaluatorConfig(cache_dir=str(tmp_path), bwrap=bwrap_that_cannot_start(tmp_path))
    with pytest.raises(SandboxUnavailable, match="No permissions to create a new namespace.*require_sandbox = false"):
        first_result(config)


def test_not_required_a_bwrap_that_cannot_start_is_left_out_and_evidence_says_so(tmp_path: Path) -> None:
    config = EvaluatorConfig(cache_dir=str(tmp_path), bwrap=bwrap_that_cannot_start(tmp_path), require_sandbox=False)
    result = first_result(config)
    launcher, held = result.evidence["sandbox"].split(": ")
    assert (result.verdict, launcher) == ("correct", "none")
    assert {"env", "seccomp", "nofile"} <= set(held.split(",")) and not {"net", "mount", "pid"} & set(held.split(","))


def compiler_in(folder: Path) -> Path:
    """A C compiler installed outside /usr, as the GPU machine's /opt/gcc/bin/gcc is."""
    gcc = folder / "opt" / "gcc" / "bin" / "gcc"
    gcc.parent.mkdir(parents=True)
    gcc.write_text("#!/bin/sh\nexec /usr/bin/gcc \"$@\"\n")
    gcc.chmod(0o755)
    return gcc


@needs_bwrap
def test_a_compiler_outside_usr_is_bound_into_the_sandbox(tmp_path: Path, monkeypatch) -> None:
    from kernelzero.sandbox.launcher import Sandbox

    gcc = compiler_in(tmp_path)
    monkeypatch.setenv("CC", str(gcc))
    sandbox = Sandbox(EvaluatorConfig(cache_dir=str(tmp_path / "cache")), tmp_path / "cache")
    (tmp_path / "cache" / "scratch").mkdir(parents=True)
    asyncio.run(sandbox.probe())
    assert sandbox.mode == "bwrap" and sandbox.compiler == str(gcc), "the compiler Triton would pick runs inside"


@needs_bwrap
def test_a_compiler_the_sandbox_cannot_run_is_refused_at_start_not_charged(tmp_path: Path, monkeypatch) -> None:
    from kernelzero.sandbox import launcher as sandbox

    bwrap = find_bwrap("")  # named before PATH narrows: found on PATH, it would be lost with it
    monkeypatch.setenv("CC", str(compiler_in(tmp_path)))
    monkeypatch.setattr(sandbox, "COMPILERS", ())
    monkeypatch.setattr(sandbox, "_compiler_dirs", lambda: [])  # as if its folder were not bound
    monkeypatch.setenv("PATH", f"{tmp_path / 'opt' / 'gcc' / 'bin'}:/nonexistent")
    with pytest.raises(SandboxUnavailable, match=r"gcc runs here but not in the sandbox.*sandbox_binds"):
        first_result(EvaluatorConfig(cache_dir=str(tmp_path / "cache"), bwrap=bwrap))


@pytest.mark.parametrize("contained", [True, False])
def test_contained_processes_never_write_bytecode_whatever_the_callers_environment(tmp_path: Path, monkeypatch,
                                                                                     contained: bool) -> None:
    """A build imports the candidate in its folder: its `__pycache__` would be in the job's copy of the build (once
    scripts/test.sh let processes write bytecode, tests/evaluator/test_lying_files.py saw it) and a candidate-written
    file an import would trust."""
    from kernelzero.sandbox.launcher import Sandbox

    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    config = EvaluatorConfig(cache_dir=str(tmp_path), sandbox=contained, require_sandbox=False)
    assert Sandbox(config, tmp_path)._environment({})["PYTHONDONTWRITEBYTECODE"] == "1"
