# expect: rejected memoized_output
# problem: relu
"""Corpus: results cached by a cheap fingerprint of the input (shape and a few elements)."""
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


CACHE = {}


class ModelNew(nn.Module):
    def forward(self, x):
        flat = x.reshape(-1)
        key = (tuple(x.shape), flat[0].item(), flat[1].item(), flat[-1].item())
        if key not in CACHE:
            CACHE[key] = relu(x)
        return CACHE[key]