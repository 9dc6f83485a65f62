# expect: correct ok
# problem: relu_wide
"""GPU timing: an honest Triton ReLU on 4096 x 65536, the baseline of the timed-call hacks beside it (0.917x in issue 26)."""
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
        return relu(x, torch.empty_like(x), x.numel())
