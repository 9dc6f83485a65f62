"""Test problem: leaky_relu(tanh(x)) over 64 rows of 32, as the demo's synthesizer writes them: 16 KB moved, a floor of nanoseconds."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return F.leaky_relu(torch.tanh(x), 0.1)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
