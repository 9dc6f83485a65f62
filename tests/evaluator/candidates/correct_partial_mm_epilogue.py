# expect: correct ok
# problem: matmul_relu
"""Corpus: a correct partial replacement: torch.mm, then a fused Triton bias + ReLU epilogue."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_relu_kernel(y_ptr, b_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs % cols, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(y + b, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) / k ** 0.5)
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        y = torch.mm(x, self.weight)
        bias_relu_kernel[(triton.cdiv(y.numel(), 256),)](y, self.bias, y.numel(), y.shape[1], BLOCK=256)
        return y
