# expect: runtime_error exception
# problem: relu
"""Corpus: raises a BaseException that is no Exception (KeyboardInterrupt) from forward; once it escaped the
trial and the child exited 70, now it is the candidate's runtime error."""
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


def relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        raise KeyboardInterrupt("not an Exception")
