"""Correct whole-kernel CUDA candidate: tanh-GELU in one elementwise kernel; fp32 only, contiguous input assumed."""
# expect: correct
# class: correct_whole
# problem: level1/88_MinGPTNewGelu.py
# backend: cuda
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

torch::Tensor gelu_tanh(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "x: contiguous fp32 CUDA");
    auto y = torch::empty_like(x);
    long n = x.numel();
    int threads = 256;
    unsigned int blocks = (unsigned int)((n + threads - 1) / threads);
    gelu_tanh_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
CPP_SRC = "torch::Tensor gelu_tanh(torch::Tensor x);"

gelu_ext = load_inline(name="kzb_gelu_cuda", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["gelu_tanh"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu_ext.gelu_tanh(x)
