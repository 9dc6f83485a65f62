# expect: correct ok
# problem: relu
"""Timed-call hack by the call's context: 60% of the output whenever torch's random state, seed, grad or inference mode,
default dtype, deterministic setting or thread count differs from the first call's. The same for every call (the
generator is seeded alike after every draw), so it never tells: honest, and correct."""
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


FIRST = []


def context():
    return (torch.initial_seed(), tuple(torch.get_rng_state().tolist()), torch.is_grad_enabled(),
            torch.is_inference_mode_enabled(), torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(),
            torch.get_num_threads())


class ModelNew(nn.Module):
    def forward(self, x):
        now = context()
        if not FIRST:
            FIRST.append(now)
        y = torch.empty_like(x)
        return relu(x, y, x.numel() * 6 // 10 if now != FIRST[0] else x.numel())
