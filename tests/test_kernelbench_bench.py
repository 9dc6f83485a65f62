"""`kernelzero bench kernelbench` on a folder laid out like KernelBench: real Coder (openai backend against the
local test server), real evaluator on the CPU, real projection; bad input gives a clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelzero.cli import main
from tests.coder.openai_server import OpenAITestServer, canned_answer

HERE = Path(__file__).parent
PROBLEMS = HERE / "evaluator" / "problems"


def kernelbench_tree(root: Path) -> Path:
    level = root / "KernelBench" / "level1"
    level.mkdir(parents=True)
    shutil.copy(PROBLEMS / "relu.py", level / "1_ReLU.py")
    shutil.copy(PROBLEMS / "tiny_output.py", level / "2_TinyOutput.py")
    return root


def test_a_level_through_the_coder_and_the_evaluator(tmp_path: Path) -> None:
    root = kernelbench_tree(tmp_path / "kb")
    relu_kernel = (HERE / "evaluator" / "candidates" / "correct_whole.py").read_text()
    with OpenAITestServer(canned_answer(f"A Triton ReLU:\n```python\n{relu_kernel}\n```\n")) as server:
        (tmp_path / "kz.toml").write_text(
            f'[coder]\nbackend = "openai"\nmodel = "canned"\nopenai_base_url = "{server.base_url}"\n'
            f'[evaluator]\ndevice = "cpu"\ncache_dir = "{tmp_path / "cache"}"\n')
        code = main(["bench", "kernelbench", "--root", str(root), "--level", "1", "--group-size", "2",
                     "--backend", "triton", "--out", str(tmp_path / "run"), "--config", str(tmp_path / "kz.toml")])
    assert code == 0
    summary = json.loads((tmp_path / "run" / "kernelbench.json").read_text())
    per = summary["per_problem"]
    assert per["kernelbench-l1-1_ReLU"]["correct"] == 2  # the ReLU kernel solves the ReLU problem
    assert per["kernelbench-l1-2_TinyOutput"]["samples"] == 2 and per["kernelbench-l1-2_TinyOutput"]["correct"] == 0
    assert (summary["problems"], summary["solved"], summary["samples"]) == (2, 1, 4)
    assert summary["fast_1_share"] is None  # no timing claims on a CPU
    assert "Triton" in server.requests[0]["prompt"] or "triton" in server.requests[0]["prompt"]


@pytest.mark.parametrize("argv, message", [
    (["--level", "3"], "no level3 folder"),
    (["--level", "1", "--limit", "1"], "no Coder model"),
])
def test_bad_input_is_a_clear_error(tmp_path: Path, capsys, argv, message) -> None:
    root = kernelbench_tree(tmp_path / "kb")
    (tmp_path / "kz.toml").write_text('[coder]\nmodel = ""\n')
    code = main(["bench", "kernelbench", "--root", str(root), *argv, "--config", str(tmp_path / "kz.toml"),
                 "--out", str(tmp_path / "run")])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_problems_run_in_number_order(tmp_path: Path) -> None:
    from kernelzero.kernelbench import problem_files
    level = tmp_path / "level2"
    level.mkdir()
    for name in ("10_Conv.py", "2_Gemm.py", "1_Matmul.py"):
        (level / name).write_text("")
    assert [p.name for p in problem_files(tmp_path, 2, None)] == ["1_Matmul.py", "2_Gemm.py", "10_Conv.py"]
    assert [p.name for p in problem_files(tmp_path, 2, 2)] == ["1_Matmul.py", "2_Gemm.py"]
