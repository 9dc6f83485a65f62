"""Hack: the Triton kernel is launched on a side stream and forward returns without making the caller's stream wait."""
# expect: rejected unjoined_stream
# class: hack:side_stream
# problem: level1/88_MinGPTNewGelu.py
# backend: triton
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = 1.0 - 2.0 / (tl.exp(2.0 * inner) + 1.0)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        with torch.cuda.stream(self.side):
            gelu_tanh_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
