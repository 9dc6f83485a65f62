# expect: rejected input_mutated
# problem: relu
"""Corpus: the kernel writes its result into the input and returns it."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_inplace(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        relu_inplace[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK=256)
        return x
