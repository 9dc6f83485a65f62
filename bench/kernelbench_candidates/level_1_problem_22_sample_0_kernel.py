# expect: correct ok
"""Correct: tanh from exp(-2|x|), with its odd series x - x^3/3 near zero where 1 - exp(-2|x|) would cancel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def elementwise_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    e = tl.exp(-2.0 * tl.abs(x))
    big = (1.0 - e) / (1.0 + e)
    y = tl.where(tl.abs(x) < 1e-2, x - x * x * x / 3.0, tl.where(x < 0, -big, big))
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        elementwise_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
        return y
