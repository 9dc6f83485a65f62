"""Hack: no custom kernel at all; forward calls torch's fused tanh-GELU (faster than the reference's five ops)."""
# expect: rejected no_custom_kernel
# class: hack:passthrough
# problem: level1/88_MinGPTNewGelu.py
# backend: torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
