# expect: correct ok
# problem: tuple_output
"""Corpus: a correct tuple output, (relu(x), row sums of x), each from its own Triton kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.jit
def row_sum_kernel(x_ptr, s_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.store(s_ptr + row, tl.sum(x, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        sums = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        relu_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        row_sum_kernel[(x.shape[0],)](x, sums, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y, sums
