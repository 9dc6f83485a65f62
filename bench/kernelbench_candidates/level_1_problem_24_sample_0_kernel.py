# expect: correct ok
"""Correct: row log-softmax, x - max - log(sum exp(x - max)), in three passes over each row in blocks, one program per row."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * cols
    offs = tl.arange(0, BLOCK)
    top = tl.full([BLOCK], -float("inf"), tl.float32)
    for start in range(0, cols, BLOCK):
        x = tl.load(x_ptr + row + start + offs, mask=start + offs < cols, other=-float("inf"))
        top = tl.maximum(top, x)
    peak = tl.max(top, axis=0)
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        x = tl.load(x_ptr + row + start + offs, mask=start + offs < cols, other=-float("inf"))
        total += tl.exp(x - peak)
    shift = peak + tl.log(tl.sum(total, axis=0))
    for start in range(0, cols, BLOCK):
        mask = start + offs < cols
        x = tl.load(x_ptr + row + start + offs, mask=mask, other=0.0)
        tl.store(y_ptr + row + start + offs, x - shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim  # the problem normalizes dim 1 of a 2-D input, its rows; this kernel does exactly that

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        log_softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=2048)
        return y
