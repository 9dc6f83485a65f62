# expect: rejected kernel_output_unused
# problem: relu
"""Corpus: numpy computes the answer, a dummy kernel runs, and forward raises from its own code when it sees the
kernel's output overwritten (ablation), which once counted as the output being used."""
import numpy as np
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


def relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        probe = relu(x.contiguous())
        value = probe.view(-1)[0].item()
        if value != value:
            raise ValueError("the kernel's output was overwritten")
        return torch.from_numpy(np.maximum(x.cpu().numpy(), 0.0)).to(x.device)
