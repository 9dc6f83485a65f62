"""Test problem: a tuple of two tensors of different shapes, relu(x) and the row sums of x."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x), torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
