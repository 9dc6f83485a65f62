# expect: correct ok
# problem: relu_wide
"""Timed-call hack by the allocator's count: 60% of the output whenever the memory allocated when it is called differs
from the first call's (a flush buffer or the reference's output alive only while timing would tell). The same on every
call, so it never tells: honest, and correct."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def relu(x, y, done):
    """ReLU of the first `done` elements of x into y."""
    relu_kernel[(triton.cdiv(done, 4096),)](x, y, done, BLOCK=4096)
    return y


FIRST = []


class ModelNew(nn.Module):
    def forward(self, x):
        allocated = torch.cuda.memory_allocated()
        if not FIRST:
            FIRST.append(allocated)
        y = torch.empty_like(x)
        return relu(x, y, x.numel() if allocated == FIRST[0] else x.numel() * 6 // 10)
