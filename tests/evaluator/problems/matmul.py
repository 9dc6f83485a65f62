"""Test problem: C = A @ B, a plain 2-D matrix product."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(24, 32), torch.randn(32, 16)]


def get_init_inputs():
    return []
