"""`kernelzero eval`: JSON on stdout and exit 0 for a verdict about the candidate; 2 for missing files, 3 for a bad
problem, 4 for an evaluator error, each with a message on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KERNELZERO_EVALUATOR_CACHE_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "kernelzero", "eval", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=240)


def test_eval_example_json(tmp_path: Path) -> None:
    done = run(tmp_path, "examples/problems/relu_matmul.py", "examples/candidates/relu_matmul_triton.py",
               "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["verdict"] == "correct" and result["reason"] == "ok"
    assert result["trials"] >= 6 and result["rel_err"] < 1e-2 and "static" in result["checks"]


def test_eval_bad_problem_exits_3_and_missing_file_2(tmp_path: Path) -> None:
    done = run(tmp_path, str(HERE / "problems" / "nondeterministic.py"), "examples/candidates/relu_matmul_triton.py",
               "--device", "cpu", "--json")
    assert done.returncode == 3 and "is unusable: non_deterministic" in done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["verdict"], result["reason"]) == ("problem_error", "non_deterministic")
    missing = run(tmp_path, "no/such/problem.py", "examples/candidates/relu_matmul_triton.py")
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_eval_evaluator_error_exits_4(tmp_path: Path, monkeypatch, capsys) -> None:
    import argparse

    from kernelzero import gpu_workers
    from kernelzero.config import Config
    from kernelzero.gpu_workers import eval_cli
    from kernelzero.gpu_workers.result import evaluation
    fault = evaluation("evaluator_error", "exception", evidence={"error": "RuntimeError: injected"})
    monkeypatch.setattr(gpu_workers, "evaluate", lambda *args, **kwargs: fault)  # the real path: test_blame.py
    args = argparse.Namespace(problem=str(HERE / "problems" / "relu.py"), candidate=str(HERE / "candidates" / "correct_whole.py"),
                              device="cpu", timeout=None, json=True, no_cache=True)
    assert eval_cli.main(args, Config()) == 4
    captured = capsys.readouterr()
    assert "the evaluator itself failed" in captured.err and "injected" in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["verdict"] == "evaluator_error"
