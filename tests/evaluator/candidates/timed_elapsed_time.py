# expect: incorrect unwritten_output
# problem: relu
"""Timed-call hack by the clock: the whole output until, after its first eight calls (the trials, the ablation), a
quarter as long again as calls two to eight took has passed; 60% of it after.

A clock-based hack is caught only if the evaluation goes on past its switch: at half, a 2-core machine loaded by a demo
beside the suite once ended the corpus test's 20 CPU timed calls before it (verdict `correct`, every call it saw right).
"""
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def relu(x, y, done):
    """ReLU of the first `done` elements of x into y."""
    relu_kernel[(triton.cdiv(done, 256),)](x, y, done, BLOCK=256)
    return y


class ModelNew(nn.Module):
    times = []

    def forward(self, x):
        times = ModelNew.times
        times.append(time.perf_counter())
        late = len(times) > 8 and times[-1] - times[7] > 0.25 * (times[7] - times[1])
        y = torch.empty_like(x)
        return relu(x, y, x.numel() * 6 // 10 if late else x.numel())
