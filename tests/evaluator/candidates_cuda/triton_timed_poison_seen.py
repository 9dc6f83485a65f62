# expect: correct ok
# problem: relu_wide
"""Timed-call hack by poisoned memory: 60% of the output whenever its new memory does not hold the evaluator's poison
(all-ones bits). Every call's memory is poisoned alike, so it never tells: honest, and correct."""
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


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        poisoned = y.view(torch.int32)[0, 0].item() == -1
        return relu(x, y, x.numel() if poisoned else x.numel() * 6 // 10)
