# expect: incorrect shape_mismatch
"""Wrong: the right sums, but keepdim forgotten: shape (B, C) where the reference returns (B, 1, C)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_rows_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    batch = tl.program_id(0).to(tl.int64)
    col = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros([BLOCK_C], tl.float32)
    for start in range(0, rows, BLOCK_R):
        r = start + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < rows) & (col[None, :] < cols)
        block = tl.load(x_ptr + batch * rows * cols + r[:, None] * cols + col[None, :], mask=mask, other=0.0)
        acc += tl.sum(block, axis=0)
    tl.store(y_ptr + batch * cols + col, acc, mask=col < cols)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        batch, rows, cols = x.shape
        y = torch.empty((batch, cols), device=x.device, dtype=x.dtype)
        sum_rows_kernel[(batch, triton.cdiv(cols, 128))](x, y, rows, cols, BLOCK_R=32, BLOCK_C=128)
        return y
