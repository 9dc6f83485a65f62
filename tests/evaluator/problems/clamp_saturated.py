"""Test problem whose output is constant because a clamp saturates on every input (like KernelBench level 2 problem 58 at some seeds)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.clamp(x - 5.0, min=-1.0, max=1.0)


def get_inputs():
    return [torch.rand(16, 32)]


def get_init_inputs():
    return []
