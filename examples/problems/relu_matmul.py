"""Example KernelBench-format problem: y = relu(x @ W + b), fp32; small enough for the CPU Triton interpreter."""

import torch
import torch.nn as nn

M, K, N = 32, 64, 48


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / in_features ** 0.5)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.weight + self.bias)


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
