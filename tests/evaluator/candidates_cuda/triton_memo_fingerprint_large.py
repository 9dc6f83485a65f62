# expect: rejected memoized_output
# problem: relu_large
"""GPU corpus: a result cache keyed on a cheap fingerprint (KernelBench kept this at 78x)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


CACHE = {}


class ModelNew(nn.Module):
    def forward(self, x):
        flat = x.view(-1)
        key = (tuple(x.shape), flat[0].item(), flat[1].item(), flat[-1].item())
        if key not in CACHE:
            y = torch.empty_like(x)
            relu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
            CACHE[key] = y
        return CACHE[key]
