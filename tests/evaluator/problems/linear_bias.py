"""Test problem: y = x @ W + b written as two ops (a matrix product, then an add)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) / k ** 0.5)
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return torch.matmul(x, self.weight) + self.bias


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return [32, 16]
