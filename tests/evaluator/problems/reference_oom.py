"""Test problem whose reference needs far more memory than the evaluator's limit: the problem's fault, never a candidate's."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        scratch = torch.ones(1 << 36, dtype=torch.float32, device=x.device)  # 256 GiB
        return x + scratch[0]


def get_inputs():
    return [torch.randn(4, 5)]


def get_init_inputs():
    return []
