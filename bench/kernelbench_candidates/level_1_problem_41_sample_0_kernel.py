# expect: correct ok
"""Correct: 1-D max pooling with stride, padding (as -inf) and dilation, one program per row of channels and block of outputs."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def max_pool1d_kernel(x_ptr, y_ptr, length, out_length, kernel_size, stride, padding, dilation, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    out = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    start = out * stride - padding
    best = tl.full([BLOCK], -float("inf"), tl.float32)
    for k in range(0, kernel_size):
        pos = start + k * dilation
        valid = (out < out_length) & (pos >= 0) & (pos < length)
        best = tl.maximum(best, tl.load(x_ptr + row * length + pos, mask=valid, other=-float("inf")))
    tl.store(y_ptr + row * out_length + out, best, mask=out < out_length)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0, dilation: int = 1,
                 return_indices: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices  # the problem passes False: only the pooled values are returned

    def forward(self, x):
        x = x.contiguous()
        batch, channels, length = x.shape
        span = self.dilation * (self.kernel_size - 1) + 1
        out_length = (length + 2 * self.padding - span) // self.stride + 1
        y = torch.empty((batch, channels, out_length), device=x.device, dtype=x.dtype)
        grid = (batch * channels, triton.cdiv(out_length, 1024))
        max_pool1d_kernel[grid](x, y, length, out_length, self.kernel_size, self.stride, self.padding, self.dilation,
                                BLOCK=1024)
        return y
