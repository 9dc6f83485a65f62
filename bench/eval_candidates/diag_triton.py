"""Correct whole-kernel Triton candidate: diag(A) @ B as a row scaling of B, one program per row block."""
# expect: correct
# class: correct_whole
# problem: level1/12_Matmul_with_diagonal_matrices_.py
# backend: triton
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def diag_scale_kernel(a_ptr, b_ptr, c_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    scale = tl.load(a_ptr + row)
    for c0 in range(0, cols, BLOCK):
        offs = c0 + tl.arange(0, BLOCK)
        mask = offs < cols
        b = tl.load(b_ptr + row * cols + offs, mask=mask)
        tl.store(c_ptr + row * cols + offs, scale * b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        rows, cols = B.shape
        C = torch.empty_like(B)
        diag_scale_kernel[(rows,)](A, B, C, cols, BLOCK=1024)
        return C
