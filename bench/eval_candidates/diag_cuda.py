"""Correct whole-kernel CUDA candidate: diag(A) @ B as a row scaling of B; contiguous fp32 inputs assumed."""
# expect: correct
# class: correct_whole
# problem: level1/12_Matmul_with_diagonal_matrices_.py
# backend: cuda
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
__global__ void diag_scale_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                  long rows, long cols) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        c[i] = a[i / cols] * b[i];
    }
}

torch::Tensor diag_scale(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && b.dim() == 2 && a.numel() == b.size(0), "a (N,), b (N, M)");
    auto c = torch::empty_like(b);
    long rows = b.size(0), cols = b.size(1);
    unsigned int blocks = (unsigned int)((rows * cols + 255) / 256);
    diag_scale_kernel<<<blocks, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), rows, cols);
    return c;
}
"""
CPP_SRC = "torch::Tensor diag_scale(torch::Tensor a, torch::Tensor b);"

diag_ext = load_inline(name="kzb_diag_cuda", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["diag_scale"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return diag_ext.diag_scale(A, B)
