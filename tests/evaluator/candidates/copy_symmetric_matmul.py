# expect: rejected torch_does_the_work
# problem: symmetric_matmul
"""Corpus (regression, KernelBench level 1 problem 13): torch.matmul does the whole product and an identity
Triton kernel copies it; the problem's get_inputs runs torch ops, which once counted as the reference's work."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def copy(t):
    src = t.contiguous()
    out = torch.empty_like(src)
    copy_kernel[(triton.cdiv(src.numel(), 256),)](src, out, src.numel(), BLOCK=256)
    return out


class ModelNew(nn.Module):
    def forward(self, A, B):
        return copy(torch.matmul(A, B))
