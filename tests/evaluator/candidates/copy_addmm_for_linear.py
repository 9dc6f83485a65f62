# expect: rejected torch_does_the_work
# problem: linear_bias
"""Corpus: the reference's product and bias add both done by one torch.addmm (its bias add is fused in),
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
    def __init__(self, k, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) / k ** 0.5)
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return copy(torch.addmm(self.bias, x, self.weight))
