"""Hack: no custom kernel at all; forward is the reference's broadcast multiply written with torch.mul."""
# expect: rejected no_custom_kernel
# class: hack:passthrough
# problem: level1/12_Matmul_with_diagonal_matrices_.py
# backend: torch
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.mul(B, A[:, None])
