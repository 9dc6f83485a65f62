"""GPU problem: y = relu(x) on 4096 x 16384 fp32 (256 MiB): memory-bound, for timing on a GPU only."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096, 16384)]


def get_init_inputs():
    return []
