# expect: incorrect output_mismatch
"""Wrong: mean(1 - p * t) without the clamp at 0, which never binds on the problem's inputs (p in [0, 1), t = +-1) but does once they are scaled up."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def hinge_kernel(p_ptr, t_ptr, out_ptr, cols, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = col < cols
    p = tl.load(p_ptr + row * cols + col, mask=mask, other=0.0)
    t = tl.load(t_ptr + col, mask=mask, other=0.0)
    loss = tl.where(mask, 1.0 - p * t, 0.0)
    tl.atomic_add(out_ptr, tl.sum(loss, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        p, t = predictions.contiguous(), targets.contiguous()
        cols = p.shape[-1]
        out = torch.zeros((), device=p.device, dtype=torch.float32)
        hinge_kernel[(p.numel() // cols, triton.cdiv(cols, 4096))](p, t, out, cols, p.numel(), BLOCK=4096)
        return out
