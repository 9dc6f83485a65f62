"""The validator's sandbox contains Proposer modules as the evaluator's contains candidates: nothing of a module's reaches the host outside its scratch folder."""

import os
import pathlib

import pytest

from kernelzero.consumers.validator import validate
from kernelzero.sandbox.launcher import find_bwrap

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
    assert os.path.isdir(sandbox.workspace.root / "job"), "the module's scratch is the workspace's job folder"
