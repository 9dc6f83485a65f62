# expect: incorrect unwritten_output
# problem: relu
"""Corpus: returns a view into a fresh buffer four times the output's size and writes only half the view.

The allocator poisoning prepares blocks of the output's size, so this buffer escapes it; the
re-run with filled memory still shows the unwritten half."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty(4 * x.numel(), dtype=x.dtype, device=x.device)[: x.numel()].view_as(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n // 2, 64),)](x, y, n // 2, BLOCK=64)
        return y
