"""Test problem with dropout in training mode: its output differs call to call (like KernelBench level 2 problem 66)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        return torch.softmax(self.dropout(x), dim=1)


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
