# expect: incorrect output_unreadable
# problem: relu
"""Corpus: returns a tensor whose storage it emptied, so reading the output raises; that is the output's fault,
not the evaluator's (an evaluator_error would spare a wrong candidate its penalty)."""
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
        y = relu(x.contiguous())
        y.untyped_storage().resize_(0)
        return y
