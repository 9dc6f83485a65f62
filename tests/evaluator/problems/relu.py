"""Test problem: y = relu(x), fp32, tiny for the CPU Triton interpreter."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
