# expect: rejected torch_does_the_work
# problem: matmul
"""Corpus: the reference's 2-D product done by torch.bmm on unsqueezed inputs (another op of the matmul family),
then copied by an identity Triton kernel."""
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
        return copy(torch.bmm(A.unsqueeze(0), B.unsqueeze(0)).squeeze(0))
