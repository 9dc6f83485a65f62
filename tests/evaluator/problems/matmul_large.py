"""GPU problem: y = a @ b, 4096 x 4096 x 4096 fp32: compute-bound, for timing on a GPU only."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
