"""The validator's sandbox contains Proposer modules as the evaluator's contains candidates: nothing of a module's reaches the host outside its scratch folder, and no file it leaves brings host content back."""

import dataclasses
import os
import pathlib
import re
import time

import msgspec
import pytest

from kernelzero.config import EvaluatorConfig, ValidatorConfig
from kernelzero.consumers.validator import validate, validator_sandbox
from kernelzero.sandbox.launcher import find_bwrap
from kernelzero.schemas.messages import ModuleVerdict
from tests import sandbox_targets

ESCAPE = pathlib.Path("/tmp/kz_validator_escape")
WRITER = '''import torch
import torch.nn as nn


def _escape():
    with open("{path}", "w") as f:
        f.write("escaped")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {in_init}

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    {in_inputs}
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("where", ["__init__", "get_inputs"])
def test_a_module_cannot_write_outside_its_scratch_folder(where, sandbox, cpu_config):
    ESCAPE.unlink(missing_ok=True)
    source = WRITER.format(path=ESCAPE, in_init="_escape()" if where == "__init__" else "pass",
                           in_inputs="_escape()" if where == "get_inputs" else "pass")
    verdict = validate(source, ["torch.relu"], cpu_config, sandbox=sandbox)
    assert not ESCAPE.exists(), "a Proposer module wrote a file on the host"
    if sandbox.sandbox.mode != "off":  # contained (bubblewrap, Landlock): the write itself fails
        assert (verdict.ok, verdict.reason) == (False, "runtime_error") and "Error" in verdict.detail, verdict


@pytest.mark.skipif(not find_bwrap(""), reason="bubblewrap is not installed")
def test_proposer_modules_run_in_bubblewrap(sandbox, cpu_config):
    source = WRITER.format(path="/kz/job/marker", in_init="pass", in_inputs="pass")
    assert validate(source, ["torch.relu"], cpu_config, sandbox=sandbox).ok
    assert sandbox.sandbox.mode == "bwrap" and "mount" in sandbox.sandbox.mechanisms and "net" in sandbox.sandbox.mechanisms
    assert not os.path.exists(sandbox.workspace.root / "job"), "the module's scratch folder is emptied once judged"


# ---- lying files: the evaluator's lie_* candidates as Proposer modules (tests/sandbox_targets.py) ----

PROPOSER_PART = '''
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
'''
LIE_TIMEOUT_S = 20.0
SLACK_S = 10.0  # a verdict within the timeout plus this: starting the run, killing what it left, answering


def lie_reason(name: str) -> str:
    """The validator's reason for a lie that the evaluator judges `timeout` (a hang) or a runtime_error (an exit)."""
    source = (sandbox_targets.CANDIDATES / f"{name}.py").read_text()
    return "timeout" if re.search(r"^# expect: timeout ", source, re.M) else "runtime_error"


@dataclasses.dataclass
class Validated:
    verdicts: dict[str, tuple[ModuleVerdict, float]]  # lie -> (its verdict, seconds it took)
    next_module: ModuleVerdict  # a valid module's verdict on the same sandbox, after every lie
    same_server: bool  # the fork server that judged the first lie judged the next module
    stderr: str  # what the validator's sandbox wrote to stderr meanwhile


@pytest.fixture(scope="module")
def validated(lie_targets, tmp_path_factory) -> Validated:
    """Every lie_* candidate as a Proposer module through one validator sandbox, the secret's folder bound read-only."""
    folder = tmp_path_factory.mktemp("lying")
    box = validator_sandbox(EvaluatorConfig(cache_dir=str(folder / "cache"), max_processes=64,
                                            sandbox_binds=[str(sandbox_targets.SECRET_DIR)]), device="cpu")
    config = ValidatorConfig(device="cpu", timeout_s=LIE_TIMEOUT_S, max_runtime_ms=5000.0, max_memory_gb=2.0)
    verdicts = {}
    with sandbox_targets.stderr_into(folder / "stderr.log"):
        try:
            box.start()
            server = box.pid
            for name in sandbox_targets.LIES:
                source = (sandbox_targets.CANDIDATES / f"{name}.py").read_text() + PROPOSER_PART
                started = time.monotonic()
                verdicts[name] = (validate(source, ["torch.relu"], config, sandbox=box), time.monotonic() - started)
            next_module = validate(WRITER.format(path="/kz/job/marker", in_init="pass", in_inputs="pass"),
                                   ["torch.relu"], config, sandbox=box)
            same = box.pid == server
        finally:
            box.close()
    return Validated(verdicts, next_module, same, (folder / "stderr.log").read_text(errors="replace"))


needs_bwrap = pytest.mark.skipif(not find_bwrap(""), reason="bubblewrap is not installed")


@needs_bwrap
@pytest.mark.parametrize("name", sandbox_targets.LIES)
def test_a_lying_module_is_rejected_within_its_timeout(validated, name: str) -> None:
    verdict, seconds = validated.verdicts[name]
    assert (verdict.ok, verdict.reason) == (False, lie_reason(name)), verdict
    assert seconds <= LIE_TIMEOUT_S + SLACK_S


@needs_bwrap
@pytest.mark.parametrize("name", sandbox_targets.LIES)
def test_a_lying_module_brings_no_host_file_into_its_verdict(validated, lie_targets, name: str) -> None:
    verdict, _ = validated.verdicts[name]
    assert lie_targets.leaked(msgspec.json.encode(verdict).decode()) == [], verdict


@needs_bwrap
def test_no_host_file_reaches_the_validators_own_output(validated, lie_targets) -> None:
    assert lie_targets.leaked(validated.stderr) == []


@needs_bwrap
def test_the_validator_judges_the_next_module_after_every_lie(validated) -> None:
    assert validated.same_server  # never lost, never restarted
    assert validated.next_module.ok, validated.next_module


@needs_bwrap
def test_a_lying_modules_output_is_its_own_and_bounded(validated) -> None:
    refused = {"lie_hard_link": ["link /tmp/kz_lying_files/secret: Invalid cross-device link",
                                 "link /etc/shadow: Invalid cross-device link"],
               "lie_device_node": ["mknod /dev/mem: Operation not permitted"]}
    for name, lines in refused.items():
        detail = validated.verdicts[name][0].detail
        assert all(line in detail for line in lines), detail
    output = validated.verdicts["lie_grows"][0].detail.partition("; output: ")[2]
    assert "kz-grows" in output and len(output) <= 1500
    assert sandbox_targets.processes_named("kz-lying-grows") == []
