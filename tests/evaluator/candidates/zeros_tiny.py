# expect: incorrect constant_output
# problem: tiny_output
"""Corpus: writes zeros; every element is within atol=1e-2 of the tiny reference."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zeros_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        zeros_kernel[(triton.cdiv(x.numel(), 256),)](y, x.numel(), BLOCK=256)
        return y
