"""Test problem whose output ignores its input: the CLI must exit 2."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)


def get_inputs():
    return [torch.randn(4, 5)]


def get_init_inputs():
    return []
