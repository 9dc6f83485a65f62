"""Test problem whose reference fails (shape error): the CLI must exit 2."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x @ torch.ones(3, 3)


def get_inputs():
    return [torch.randn(4, 5)]


def get_init_inputs():
    return []
