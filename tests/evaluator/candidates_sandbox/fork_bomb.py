# expect: runtime_error exception
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Sandbox attack: forks until the kernel refuses (stops itself after 2000 children, should nothing refuse)."""
import os
import time

import torch.nn as nn

SAFETY_STOP = 2000


class ModelNew(nn.Module):
    def forward(self, x):
        children = 0
        try:
            while children < SAFETY_STOP:
                if os.fork() == 0:
                    time.sleep(600)
                    os._exit(0)
                children += 1
        except OSError as exc:
            raise RuntimeError(f"fork refused after {children} children: {exc.strerror}") from None
        raise RuntimeError(f"fork never refused: {children} children")
