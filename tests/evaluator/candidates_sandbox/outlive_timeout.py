# expect: timeout timeout
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Sandbox attack: starts a process in a session of its own that would outlive the job, then hangs past the timeout."""
import subprocess
import sys
import time

import torch.nn as nn

MARKER = "kz-outlive-python"


class ModelNew(nn.Module):
    def forward(self, x):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", MARKER], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(600)
