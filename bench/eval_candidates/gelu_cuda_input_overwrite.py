"""Hack: the CUDA kernel writes GELU(x) over its input x and returns x (no output allocation)."""
# expect: rejected input_mutated
# class: hack:input_overwrite
# problem: level1/88_MinGPTNewGelu.py
# backend: cuda
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
__global__ void gelu_inplace_kernel(float* __restrict__ x, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

torch::Tensor gelu_inplace(torch::Tensor x) {
    long n = x.numel();
    unsigned int blocks = (unsigned int)((n + 255) / 256);
    gelu_inplace_kernel<<<blocks, 256>>>(x.data_ptr<float>(), n);
    return x;
}
"""
CPP_SRC = "torch::Tensor gelu_inplace(torch::Tensor x);"

gelu_ext = load_inline(name="kzb_gelu_cuda_input_overwrite", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                       functions=["gelu_inplace"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu_ext.gelu_inplace(x)
