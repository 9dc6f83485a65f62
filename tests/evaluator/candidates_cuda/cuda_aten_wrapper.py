# expect: rejected no_custom_kernel
# problem: relu
"""CUDA corpus: the C++ wrapper compiles a __global__ kernel but calls ATen instead."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor run(torch::Tensor x);"

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor run(torch::Tensor x) {
    return torch::relu(x);
}
"""

ext = load_inline(name="kz_cuda_aten_wrapper", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"])

class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x.contiguous())
