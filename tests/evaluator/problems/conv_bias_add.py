"""Test problem: a bias-free 2-D convolution, then a per-channel bias add."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels_in, channels_out):
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, 3, bias=False)
        self.bias = nn.Parameter(torch.randn(channels_out, 1, 1))

    def forward(self, x):
        return self.conv(x) + self.bias


def get_inputs():
    return [torch.randn(2, 3, 10, 10)]


def get_init_inputs():
    return [3, 4]
