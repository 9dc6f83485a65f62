# expect: rejected torch_does_the_work
# problem: conv_bias_add
"""Corpus: the reference's bias add folded into the convolution's own bias argument, so torch does both,
then copied by an identity Triton kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl
import torch.nn.functional as F


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
    def __init__(self, channels_in, channels_out):
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, 3, bias=False)
        self.bias = nn.Parameter(torch.randn(channels_out, 1, 1))

    def forward(self, x):
        return copy(F.conv2d(x, self.conv.weight, self.bias.view(-1)))
