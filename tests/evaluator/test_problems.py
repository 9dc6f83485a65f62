"""kernelzero.kit.problems: loading KernelBench-format modules, with errors that name what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelzero.kit.problems import ProblemError, load_problem

ROOT = Path(__file__).parents[2]


def test_loads_example_problem_in_fresh_namespace() -> None:
    source = (ROOT / "examples" / "problems" / "relu_matmul.py").read_text()
    a, b = load_problem(source), load_problem(source)
    assert a.module is not b.module and a.Model is not b.Model
    model = a.Model(*a.get_init_inputs())
    (x,) = a.get_inputs()
    assert model(x).shape == (32, 48)
    assert len(a.source_hash) == 64


@pytest.mark.parametrize("source,reason", [
    ("def f(:\n", "syntax_error"),
    ("raise RuntimeError('boom')\n", "import_error"),
    ("def get_inputs(): return []\ndef get_init_inputs(): return []\n", "missing_Model"),
    ("class Model: pass\ndef get_init_inputs(): return []\n", "missing_get_inputs"),
    ("Model = 3\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n", "bad_Model"),
])
def test_errors_name_the_problem(source: str, reason: str) -> None:
    with pytest.raises(ProblemError) as info:
        load_problem(source)
    assert info.value.reason == reason

