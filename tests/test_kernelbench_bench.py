"""`kernelzero bench kernelbench` on a folder laid out like KernelBench: real Coder (openai backend against the
local test server) or a KernelBench-layout folder of generations, real evaluator on the CPU, real projection;
bad input gives a clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelzero.app.cli import main
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
    per = {p["name"]: p for p in summary["per_problem"]}
    assert per["1_ReLU"]["correct"] == 2  # the ReLU kernel solves the ReLU problem
    assert per["2_TinyOutput"]["samples"] == 2 and per["2_TinyOutput"]["correct"] == 0
    assert (summary["problems"], summary["samples"], summary["pass_at"]["1"]) == (2, 4, 0.5)
    assert summary["fast_p"]["1"] is None  # no timing claims on a CPU
    assert "Triton" in server.requests[0]["prompt"] or "triton" in server.requests[0]["prompt"]


@pytest.mark.parametrize("argv, message", [
    (["--level", "3"], "no level3 folder"),
    (["--level", "1", "--limit", "1"], "no Coder model"),
    (["--level", "1", "--candidates", "no/such/dir"], "is not a directory"),
    (["--level", "2", "--candidates", str(HERE)], "no level2 folder"),
    (["--level", "1", "--candidates", str(HERE)], "holds no level_1_problem_P_sample_S_kernel.py files"),
    (["--level", "1", "--k", "0,10"], "--k takes positive integers"),
])
def test_bad_input_is_a_clear_error(tmp_path: Path, capsys, argv, message) -> None:
    root = kernelbench_tree(tmp_path / "kb")
    (tmp_path / "kz.toml").write_text('[coder]\nmodel = ""\n')
    code = main(["bench", "kernelbench", "--root", str(root), *argv, "--config", str(tmp_path / "kz.toml"),
                 "--out", str(tmp_path / "run")])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_problems_run_in_number_order(tmp_path: Path) -> None:
    from kernelzero.app.kernelbench import problem_files
    level = tmp_path / "level2"
    level.mkdir()
    for name in ("10_Conv.py", "2_Gemm.py", "1_Matmul.py"):
        (level / name).write_text("")
    assert [p.name for p in problem_files(tmp_path, 2, None)] == ["1_Matmul.py", "2_Gemm.py", "10_Conv.py"]
    assert [p.name for p in problem_files(tmp_path, 2, 2)] == ["1_Matmul.py", "2_Gemm.py"]


def candidates_tree(tmp_path: Path) -> tuple[Path, Path]:
    """Our own tiny problems as a KernelBench level 1, and generations for them in KernelBench's layout."""
    level = tmp_path / "kb" / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for number, name, problem in ((1, "ReLU", "relu"), (2, "MSELoss", "mse_loss"), (3, "Saturated", "clamp_saturated"),
                                  (4, "TupleOutput", "tuple_output"), (5, "Argmax", "argmax_int")):
        shutil.copy(PROBLEMS / f"{problem}.py", level / f"{number}_{name}.py")
    run = tmp_path / "generations"
    run.mkdir()
    corpus = HERE / "evaluator" / "candidates"
    for (problem, sample), candidate in {
        (1, 0): "correct_whole", (1, 1): "wrong_result", (1, 2): "passthrough_torch",
        (2, 0): "correct_mse_loss", (2, 1): "wrong_loss_shape",
        (3, 0): "correct_whole",  # the problem's output is constant: excluded, whatever the sample
        (4, 0): "correct_tuple_output",
        (9, 0): "correct_whole",  # no problem 9 in the level: not scored
    }.items():
        shutil.copy(corpus / f"{candidate}.py", run / f"level_1_problem_{problem}_sample_{sample}_kernel.py")
    shutil.copy(corpus / "correct_whole.py", run / "level_2_problem_1_sample_0_kernel.py")  # another level
    (run / "level_1_problem_1_sample_0_prompt.txt").write_text("not a kernel")
    return tmp_path / "kb", run


def test_generations_made_elsewhere_are_rescored_end_to_end(tmp_path: Path, capsys) -> None:
    root, run = candidates_tree(tmp_path)
    (tmp_path / "kz.toml").write_text(f'[evaluator]\ncache_dir = "{tmp_path / "cache"}"\n')
    code = main(["bench", "kernelbench", "--root", str(root), "--level", "1", "--candidates", str(run),
                 "--device", "cpu", "--k", "1,10", "--json", "--out", str(tmp_path / "out"),
                 "--config", str(tmp_path / "kz.toml")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])  # the JSON object is the last line
    assert (summary["level"], summary["problems"], summary["samples"]) == (1, 3, 6)
    # pass@1: (1/3 + 1/2 + 1) / 3; pass@10 with n < 10 takes k = n: any correct sample passes
    assert summary["pass_at"]["1"] == pytest.approx((1 / 3 + 1 / 2 + 1) / 3)
    assert summary["pass_at"]["10"] == pytest.approx(1.0)
    assert set(summary["fast_p"]) == {"0", "0.5", "0.8", "1", "1.5", "2"}
    assert all(v is None for v in summary["fast_p"].values())  # no timing claims on a CPU
    assert summary["excluded"] == [{"problem": 3, "name": "3_Saturated", "reason": "constant_output"}]
    assert summary["missing"] == [5]
    per = {p["problem"]: p for p in summary["per_problem"]}
    assert set(per) == {1, 2, 3, 4}
    assert per[1]["verdicts"] == {"correct ok": 1, "incorrect output_mismatch": 1, "rejected no_custom_kernel": 1}
    assert (per[2]["samples"], per[2]["correct"], per[2]["pass_at"]["1"]) == (2, 1, 0.5)
    assert per[3]["excluded"] == "constant_output" and per[3]["pass_at"]["1"] is None
    assert "| 1 1_ReLU | 3 | 1 |" in captured.out and "excluded: constant_output" in captured.out
    assert "problems [9]" in captured.err
    assert json.loads((tmp_path / "out" / "kernelbench.json").read_text())["pass_at"] == summary["pass_at"]

    sql = main(["sql", "--db", str(tmp_path / "out" / "analytics.duckdb"), "--csv",
                "SELECT s.group_index, e.verdict FROM samples s JOIN evaluations e USING (sample_id) "
                "WHERE s.module_id = 'kernelbench-l1-1_ReLU' ORDER BY 1"])
    assert sql == 0
    assert capsys.readouterr().out.split() == ["group_index,verdict", "0,correct", "1,incorrect", "2,rejected"]
