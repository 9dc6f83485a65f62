# expect: incorrect nan_parity
"""Wrong: softmax without subtracting the row maximum; exp overflows once inputs are large (the evaluator's scaled trial)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * cols
    offs = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        x = tl.load(x_ptr + row + start + offs, mask=start + offs < cols, other=-float("inf"))
        total += tl.exp(x)
    norm = tl.sum(total, axis=0)
    for start in range(0, cols, BLOCK):
        mask = start + offs < cols
        x = tl.load(x_ptr + row + start + offs, mask=mask, other=-float("inf"))
        tl.store(y_ptr + row + start + offs, tl.exp(x) / norm, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=2048)
        return y
