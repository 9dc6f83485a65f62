# expect: correct ok
# problem: relu
"""Timed-call hack by input identity: 60% of the output whenever the input is another object or address than on the
first call. Every call gets the same buffers, refilled in place, so it never tells: honest, and correct."""
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


def relu(x, y, done):
    """ReLU of the first `done` elements of x into y."""
    relu_kernel[(triton.cdiv(done, 256),)](x, y, done, BLOCK=256)
    return y


FIRST = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not FIRST:
            FIRST.append((id(x), x.data_ptr()))
        other = FIRST[0] != (id(x), x.data_ptr())
        y = torch.empty_like(x)
        return relu(x, y, x.numel() * 6 // 10 if other else x.numel())
