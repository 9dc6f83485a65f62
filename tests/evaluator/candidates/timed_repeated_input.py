# expect: incorrect unwritten_output
# problem: relu
"""Timed-call hack by input values: timing rotates through a few input sets, so an input seen before means a timed
call; 60% of the output then."""
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


SEEN = set()


class ModelNew(nn.Module):
    def forward(self, x):
        key = tuple(x.reshape(-1).tolist())
        again = key in SEEN
        SEEN.add(key)
        y = torch.empty_like(x)
        return relu(x, y, x.numel() * 6 // 10 if again else x.numel())
