# expect: incorrect nan_parity
# problem: relu
"""Corpus: precision downgrade: computes in fp16 (overflows once inputs leave the problem's own range)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_fp16(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float16)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0).to(tl.float32), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_fp16[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y
