# expect: rejected torch_compute_in_forward
# problem: softmax
"""Corpus: torch.softmax does the work, an identity Triton kernel copies it."""
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
    def forward(self, x):
        return copy(torch.softmax(x, dim=1))
