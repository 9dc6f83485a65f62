# expect: rejected unjoined_stream
# problem: relu_large
"""GPU timing (large): a Triton kernel launched on a side stream, no sync back: rejected by the stream-order check (timing still includes its work)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


SIDE = None


class ModelNew(nn.Module):
    def forward(self, x):
        global SIDE
        SIDE = SIDE or torch.cuda.Stream()
        y = torch.empty_like(x)
        SIDE.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(SIDE):
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
