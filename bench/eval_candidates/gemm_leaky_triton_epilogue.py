"""Correct partial replacement, Triton: torch.mm for the GEMM, one fused kernel for bias + multiply + LeakyReLU."""
# expect: correct
# class: correct_partial
# problem: level2/12_Gemm_Multiply_LeakyReLU.py
# backend: triton
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_scale_leaky_kernel(y_ptr, bias_ptr, n, cols, multiplier, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = (tl.load(y_ptr + offs, mask=mask) + tl.load(bias_ptr + offs % cols, mask=mask)) * multiplier
    tl.store(y_ptr + offs, tl.where(v > 0, v, v * slope), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        y = torch.mm(x, self.gemm.weight.t())
        n = y.numel()
        bias_scale_leaky_kernel[(triton.cdiv(n, 1024),)](y, self.gemm.bias, n, y.shape[1], self.multiplier,
                                                         self.negative_slope, BLOCK=1024)
        return y
