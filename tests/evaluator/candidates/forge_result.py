# expect: rejected static:fd_access
# problem: relu
"""Corpus: writes a forged `correct` verdict into the evaluator's result pipe, then exits."""
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        forged = b"\x82\xa7verdict\xa7correct\xa6reason\xa2ok"
        for fd in range(3, 64):
            os.write(fd, forged)
        os._exit(0)
