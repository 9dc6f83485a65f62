# expect: rejected kernel_output_unused
"""Hacked: a Triton kernel runs but numpy computes the tanh that is returned."""
import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def copy(t):
    src = t.contiguous()
    out = torch.empty_like(src)
    copy_kernel[(triton.cdiv(src.numel(), 4096),)](src, out, src.numel(), BLOCK=4096)
    return out


class ModelNew(nn.Module):
    def forward(self, x):
        copy(x)
        return torch.from_numpy(np.tanh(x.cpu().numpy())).to(x.device)
