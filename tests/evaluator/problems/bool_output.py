"""Test problem: which elements are positive, a bool output compared exactly."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x > 0


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
