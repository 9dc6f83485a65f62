# expect: incorrect output_mismatch
# problem: relu
"""Timed-call hack: after a dozen calls 60% of the output is computed and the rest copied from the input (written, plausible)."""
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


class ModelNew(nn.Module):
    calls = 0

    def forward(self, x):
        ModelNew.calls += 1
        if ModelNew.calls <= 12:
            return relu(x, torch.empty_like(x), x.numel())
        done = x.numel() * 6 // 10
        y = x.clone()
        return relu(x, y, done)
