"""Test problem: y = relu(x) on inputs drawn with torch.rand, never negative (as KernelBench's level 1 ReLU draws them)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(16, 32)]


def get_init_inputs():
    return []
