# expect: correct ok
# problem: mse_loss
"""Corpus: a correct Triton MSE loss; its output is a 0-dim tensor, like the reference's."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mse_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(a_ptr + offs, mask=mask, other=0.0) - tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(d * d, axis=0) / n)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        a, b = predictions.contiguous(), targets.contiguous()
        out = torch.zeros((), device=a.device, dtype=torch.float32)
        mse_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), BLOCK=1024)
        return out
