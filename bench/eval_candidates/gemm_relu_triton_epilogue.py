"""Correct partial replacement, Triton: torch.mm for the GEMM, one fused kernel for bias + ReLU."""
# expect: correct
# class: correct_partial
# problem: level2/76_Gemm_Add_ReLU.py
# backend: triton
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_relu_kernel(y_ptr, bias_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask) + tl.load(bias_ptr + offs % cols, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(v, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        y = torch.mm(x, self.gemm.weight.t())
        n = y.numel()
        bias_relu_kernel[(triton.cdiv(n, 1024),)](y, self.bias, n, y.shape[1], BLOCK=1024)
        return y
