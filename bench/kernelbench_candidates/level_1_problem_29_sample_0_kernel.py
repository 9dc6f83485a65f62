# expect: correct ok
"""Correct: Softplus as max(x, 0) + log1p(exp(-|x|)) (no overflow), x itself above torch's threshold 20; log1p by log(u) * e / (u - 1), u = 1 + e."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def elementwise_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    e = tl.exp(-tl.abs(x))
    u = 1.0 + e
    exact = u == 1.0
    log1p = tl.where(exact, e, tl.log(u) * e / tl.where(exact, 1.0, u - 1.0))
    y = tl.where(x > 20.0, x, tl.maximum(x, 0.0) + log1p)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        elementwise_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
        return y
