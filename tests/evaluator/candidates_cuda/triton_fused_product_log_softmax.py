# expect: incorrect nan_parity
# problem: elu_square_log_softmax
"""GPU numerics: the Triton teacher's old answer, the row's maximum subtracted from the product itself.

Seen on an H100 (the demo's audit, 1 of 97 answers): Triton fuses `t0 * t0 - max` into one FMA whose product is
not rounded, so where the evaluator's inputs scaled by 1e5 made t0 * t0 about 1e10 the maximum's own entry came out
thousands from 0, its exp 0 or inf, and the output inf or -inf in 448-480 of 512 elements (the reference: finite).
The CPU interpreter rounds the product and gets it right. The teacher subtracts from the masked row since
(bootstrap/teacher_ops.py, ROW_OR_LOWEST).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    t0a = tl.exp(x)
    t0 = tl.where(x > 0.0, x, tl.where(tl.abs(x) < 0.5, tl.where(t0a == 1.0, x, (t0a - 1.0) * x / tl.log(t0a)), t0a - 1.0))
    t1 = t0 * t0
    t2a = t1 - tl.max(tl.where(mask, t1, float('-inf')), axis=0)
    t2 = t2a - tl.log(tl.sum(tl.where(mask, tl.exp(t2a), 0.0), axis=0))
    tl.store(out_ptr + offs, t2, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        kernel[(out.numel() // x.shape[-1],)](x, out, x.shape[-1], BLOCK=triton.next_power_of_2(x.shape[-1]))
        return out
