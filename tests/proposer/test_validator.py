"""The validator on a corpus of bad modules (each rejected with its reason), and duplicate detection."""

import pathlib

import msgspec
import pytest

from kernelzero.consumers.validator import Deduplicator, fingerprint, normalized_ast_hash, validate
from kernelzero.producers.synthesizer import synthesize

from .conftest import SMALL

BAD = pathlib.Path(__file__).parent / "bad_modules"


def _header(path: pathlib.Path) -> tuple[str, list[str]]:
    first = path.read_text().splitlines()[0]
    expect, apis = first.removeprefix("# expect: ").split("; apis: ")
    return expect, [a.strip() for a in apis.split(",")]


@pytest.mark.parametrize("path", sorted(BAD.glob("*.py")), ids=lambda p: p.stem)
def test_bad_module_is_rejected_with_its_reason(path, sandbox, cpu_config):
    expect, apis = _header(path)
    config = msgspec.structs.replace(cpu_config, max_runtime_ms=200.0, max_memory_gb=0.5, timeout_s=4.0)
    verdict = validate(path.read_text(), apis, config, sandbox=sandbox)
    assert not verdict.ok
    assert verdict.reason == expect, verdict.detail


def test_good_module_reports_trace_runtime_and_fingerprint(sandbox, cpu_config):
    apis = ["torch.nn.Linear", "torch.nn.functional.relu", "torch.cumsum"]
    verdict = validate(synthesize(apis, seed=0, scale=SMALL).source, apis, cpu_config, sandbox=sandbox)
    assert verdict.ok, verdict
    assert {"linear", "relu", "cumsum"} <= set(verdict.op_trace)
    assert verdict.runtime_ms > 0 and verdict.device == "cpu"
    assert len(verdict.ast_hash) == 16 and len(verdict.trace_hash) == 16


def test_sandbox_survives_a_module_that_patches_torch(sandbox, cpu_config):
    patcher = (BAD / "constant_output.py").read_text().replace(
        "return torch.relu(-x.abs())", "torch.relu = lambda t: t * 0\n        return torch.relu(x)")
    validate(patcher, ["torch.relu"], cpu_config, sandbox=sandbox)
    apis = ["torch.relu"]
    assert validate(synthesize(apis, seed=0, scale=SMALL).source, apis, cpu_config, sandbox=sandbox).ok


def test_renamed_copy_is_a_duplicate(sandbox, cpu_config):
    apis = ["torch.nn.Conv2d", "torch.nn.functional.gelu", "torch.sum"]
    source = synthesize(apis, seed=0, scale=SMALL).source
    renamed = source.replace("self.m0", "self.conv").replace("x", "inp").replace('"""Synth', '"""Other doc. Synth')
    renamed = renamed.replace("torch.randinp", "torch.randn")  # undo the rename inside torch.randn
    assert renamed != source
    assert normalized_ast_hash(renamed) == normalized_ast_hash(source)
    first = validate(source, apis, cpu_config, sandbox=sandbox)
    second = validate(renamed, apis, cpu_config, sandbox=sandbox)
    assert first.ok and second.ok
    dedup = Deduplicator()
    dedup.add("module-a", fingerprint(first))
    assert dedup.duplicate_of("module-b", second) == "module-a"
    assert dedup.duplicate_of("module-a", first) is None  # a redelivered module is not its own duplicate


LAYERNORM_TANH = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm({d})

    def forward(self, x):
        return torch.tanh(self.norm(x))


def get_inputs():
    return [torch.randn({n}, {d})]


def get_init_inputs():
    return []
"""


def test_same_ops_and_ranks_with_other_sizes_is_a_duplicate(sandbox, cpu_config):
    apis = ["torch.nn.LayerNorm", "torch.tanh"]
    small, large = LAYERNORM_TANH.format(n=16, d=32), LAYERNORM_TANH.format(n=64, d=128)
    a, b = (validate(s, apis, cpu_config, sandbox=sandbox) for s in (small, large))
    assert a.ok and b.ok, (a, b)
    assert a.ast_hash != b.ast_hash and a.trace_hash == b.trace_hash
    dedup = Deduplicator()
    dedup.add("small", fingerprint(a))
    assert dedup.duplicate_of("large", b) == "small"
