# expect: correct ok
# problem: tanh_leaky_rows
"""GPU timing: the Triton teacher's answer to a 2,048-element module, a kernel shorter than the synchronization's cost.

Seen on an H100 (the demo's audit, 3 of 97 answers): its time read as 1e-6 ms, below half the physical floor of
its 16 KB (5e-6 ms), so a correct kernel was rejected beyond_physical_limit. Times now read at least the timer's
resolution, and a floor the clock cannot resolve rejects nothing (gpu_workers/timing.py).
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
    t0 = tl.where(tl.abs(x) < 0.0625, x - x * x * x * (0.3333333333333333 - 0.13333333333333333 * x * x),
                  2.0 * tl.sigmoid(2.0 * x) - 1.0)
    t1 = tl.where(t0 > 0.0, t0, t0 * 0.1)
    tl.store(out_ptr + offs, t1, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        kernel[(out.numel() // x.shape[-1],)](x, out, x.shape[-1], BLOCK=triton.next_power_of_2(x.shape[-1]))
        return out
