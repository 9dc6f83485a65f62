# expect: correct ok
"""Correct: matrix times a Python scalar, one elementwise Triton kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(a_ptr, c_ptr, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) * s, mask=mask)


class ModelNew(nn.Module):
    def forward(self, A, s):
        A = A.contiguous()
        C = torch.empty_like(A)
        scale_kernel[(triton.cdiv(A.numel(), 4096),)](A, C, s, A.numel(), BLOCK=4096)
        return C
