# expect: correct ok
"""Correct: SELU, scale * (x if x > 0 else alpha * expm1(x)), expm1 from its series near zero where exp(x) - 1 would cancel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def elementwise_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    neg = tl.minimum(x, 0.0)
    em1 = tl.where(neg > -1e-2, neg + neg * neg * 0.5 + neg * neg * neg / 6.0, tl.exp(neg) - 1.0)
    y = 1.0507009873554805 * tl.where(x > 0, x, 1.6732632423543772 * em1)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        elementwise_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
        return y
