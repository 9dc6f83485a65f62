"""bench/kernelbench_sweep.py on our own problems laid out like KernelBench: the copy candidate is rejected for every op family, on the CPU."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).parent
PROBLEMS = HERE / "evaluator" / "problems"
# problem file -> the verdict its copy candidate must get (torch computes the reference, a Triton kernel copies it)
EXPECTED = {
    "relu": "rejected torch_compute_in_forward",
    "softmax": "rejected torch_compute_in_forward",
    "mse_loss": "rejected torch_compute_in_forward",  # a 0-dim output
    "tuple_output": "rejected torch_compute_in_forward",
    "argmax_int": "rejected torch_compute_in_forward",  # an int64 output through the copy
    "bool_output": "rejected torch_compute_in_forward",
    "python_scalar": "rejected no_custom_kernel",  # a Python float: nothing to copy, so no kernel ran
    "linear_bias": "rejected torch_compute_in_forward",
    "matmul": "rejected torch_does_the_work",
    "symmetric_matmul": "rejected torch_does_the_work",
    "conv_bias_add": "rejected torch_compute_in_forward",
    "clamp_saturated": "problem_error constant_output",
}


def load_sweep():
    spec = importlib.util.spec_from_file_location("kernelbench_sweep", HERE.parent / "bench" / "kernelbench_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_copy_candidate_is_rejected(tmp_path: Path, capsys) -> None:
    sweep = load_sweep()
    level = tmp_path / "kb" / "KernelBench" / "level1"
    level.mkdir(parents=True)
    names = {}
    for number, problem in enumerate(EXPECTED, start=1):
        shutil.copy(PROBLEMS / f"{problem}.py", level / f"{number}_{problem}.py")
        names[f"{number}_{problem}"] = problem
    code = sweep.main(["--kb", str(tmp_path / "kb"), "--out", str(tmp_path / "out"), "--levels", "1", "--dry-run"])
    assert code == 0, capsys.readouterr().out
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["problems"]
    got = {names[r["name"]]: f"{r['verdict']} {r['reason']}" for r in rows}
    assert got == EXPECTED
    assert all(r["seconds"] > 0 for r in rows)
    report = (tmp_path / "out" / "results.md").read_text()
    assert "NOT REJECTED" not in report and "rejected torch_does_the_work: 2" in report


def test_a_copy_candidate_that_passes_is_listed_loudly_and_fails_the_run(tmp_path: Path, monkeypatch) -> None:
    sweep = load_sweep()
    level = tmp_path / "kb" / "level1"
    level.mkdir(parents=True)
    shutil.copy(PROBLEMS / "relu.py", level / "1_relu.py")
    correct = (HERE / "evaluator" / "candidates" / "correct_whole.py").read_text()
    monkeypatch.setattr(sweep, "copy_candidate", lambda source: correct)  # a candidate the evaluator accepts
    assert sweep.main(["--kb", str(tmp_path / "kb"), "--out", str(tmp_path / "out"), "--levels", "1", "--dry-run"]) == 1
    assert "1 COPY CANDIDATES NOT REJECTED" in (tmp_path / "out" / "results.md").read_text()


def test_shrink_sets_module_level_sizes_but_keeps_small_ones() -> None:
    sweep = load_sweep()
    small = sweep.shrink("N = 2048 * 2\nshape = (32768, 3)\nk = 3\nx = 2 ** 40 + 1\nname = 'a'\n")
    assert small == "N = 16\nshape = (16, 3)\nk = 3\nx = 16\nname = 'a'"
