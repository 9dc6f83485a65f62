# expect: correct ok
"""Correct: Smooth L1 (Huber, beta 1) loss into a 0-dim tensor: per-block partial sums, then one program adds them and divides by n."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def huber_partial_kernel(a_ptr, b_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.abs(tl.load(a_ptr + offs, mask=mask, other=0.0) - tl.load(b_ptr + offs, mask=mask, other=0.0))
    loss = tl.where(d < 1.0, 0.5 * d * d, d - 0.5)
    tl.store(part_ptr + pid, tl.sum(tl.where(mask, loss, 0.0), axis=0))


@triton.jit
def mean_kernel(part_ptr, out_ptr, parts, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, parts, BLOCK):
        acc += tl.load(part_ptr + start + offs, mask=start + offs < parts, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        a, b = predictions.contiguous(), targets.contiguous()
        parts = triton.cdiv(a.numel(), 8192)
        partial = torch.empty(parts, device=a.device, dtype=torch.float32)
        out = torch.empty((), device=a.device, dtype=torch.float32)
        huber_partial_kernel[(parts,)](a, b, partial, a.numel(), BLOCK=8192)
        mean_kernel[(1,)](partial, out, parts, a.numel(), BLOCK=1024)
        return out
