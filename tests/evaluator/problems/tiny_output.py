"""Test problem whose output is tiny (|y| < 1e-3): an all-zero answer is within a naive atol=1e-2."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 1e-3


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
