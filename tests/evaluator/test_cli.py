"""`kernelzero eval`: JSON on stdout and exit 0 for a verdict; exit 2 with a message for missing files and bad problems."""

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
    return subprocess.run([sys.executable, "-m", "kernelzero.cli", "eval", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=240)


def test_eval_example_json(tmp_path: Path) -> None:
    done = run(tmp_path, "examples/problems/relu_matmul.py", "examples/candidates/relu_matmul_triton.py",
               "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["verdict"] == "correct" and result["reason"] == "ok"
    assert result["trials"] >= 6 and result["rel_err"] < 1e-2 and "static" in result["checks"]


def test_eval_bad_problem_and_missing_file_exit_2(tmp_path: Path) -> None:
    done = run(tmp_path, str(HERE / "problems" / "nondeterministic.py"), "examples/candidates/relu_matmul_triton.py",
               "--device", "cpu")
    assert done.returncode == 2 and "non_deterministic" in done.stderr
    missing = run(tmp_path, "no/such/problem.py", "examples/candidates/relu_matmul_triton.py")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
