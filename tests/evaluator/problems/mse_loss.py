"""Test problem: mean squared error, a 0-dim output (the form of KernelBench's loss problems)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    scale = torch.rand(())
    return [torch.rand(64, 48) * scale, torch.rand(64, 48)]


def get_init_inputs():
    return []
