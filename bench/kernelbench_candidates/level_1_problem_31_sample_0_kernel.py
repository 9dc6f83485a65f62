# expect: correct ok
"""Correct: ELU with the alpha given at construction, x if x > 0 else alpha * expm1(x), expm1 from its series near zero."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def elu_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    neg = tl.minimum(x, 0.0)
    em1 = tl.where(neg > -1e-2, neg + neg * neg * 0.5 + neg * neg * neg / 6.0, tl.exp(neg) - 1.0)
    tl.store(y_ptr + offs, tl.where(x > 0, x, alpha * em1), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        elu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), self.alpha, BLOCK=4096)
        return y
