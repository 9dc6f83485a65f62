"""The evaluator's fork server preloads what its forks inherit without leaving them unable to use CUDA, on any host."""

from __future__ import annotations

import os
import subprocess
import sys

PRELOAD_THEN_FORK = """
import os, torch
from kernelzero.gpu_workers.zygote import EvaluationJobs
EvaluationJobs().preload()
pid = os.fork()
if pid == 0:
    os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_preload_outside_a_cpu_pool_fails_nothing_and_leaves_forks_good() -> None:
    """scripts/setup.sh preloads with Triton not interpreting: on a host without a GPU, making Triton's driver failed
    ('0 active drivers'), and asking torch for CUDA through its runtime marked every later fork bad."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTORCH_NVML_BASED_CUDA_CHECK")}
    done = subprocess.run([sys.executable, "-c", PRELOAD_THEN_FORK], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "0", "the fork was left unable to initialise CUDA"
