"""Test problem whose reference draws fresh randomness on every call: the CLI must exit 2."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)


def get_inputs():
    return [torch.randn(4, 5)]


def get_init_inputs():
    return []
