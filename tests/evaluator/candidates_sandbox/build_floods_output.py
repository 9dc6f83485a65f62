# expect: rejected no_custom_kernel
# problem: relu
# via: build
"""Flooding build: the candidate's Python prints 512 MiB while its build runs (the pool once held all of a build's output in memory), then the build ends well."""
import os
import sys

import torch
import torch.nn as nn

if os.getcwd() == "/kz/ext":  # the build runs here; the job in /kz/job
    line = "kz-flood " * 7281 + "\n"  # 64 KiB
    for _ in range(8192):
        sys.stdout.write(line)
    sys.stdout.flush()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
