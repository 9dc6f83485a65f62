"""Test problem: the sum of all elements as a Python float (a forward may return plain numbers)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.sum(x).item()


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
