# expect: correct ok
# problem: linear_bias
"""Corpus: a legitimate split of the same problem: torch.mm for the product, the bias add in a Triton kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_kernel(y_ptr, b_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=mask) + tl.load(b_ptr + offs % cols, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) / k ** 0.5)
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        y = torch.mm(x, self.weight)
        bias_kernel[(triton.cdiv(y.numel(), 256),)](y, self.bias, y.numel(), y.shape[1], BLOCK=256)
        return y
