"""Hack/crash: the CUDA kernel stores 4 TiB past its output; the launch must end in an illegal-address error, not a verdict."""
# expect: runtime_error cuda_error
# class: hack:illegal_address
# problem: level1/88_MinGPTNewGelu.py
# backend: cuda
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
__global__ void gelu_wild_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i + (1L << 40)] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

torch::Tensor gelu_wild(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    unsigned int blocks = (unsigned int)((n + 255) / 256);
    gelu_wild_kernel<<<blocks, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
CPP_SRC = "torch::Tensor gelu_wild(torch::Tensor x);"

gelu_ext = load_inline(name="kzb_gelu_cuda_illegal_address", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                       functions=["gelu_wild"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu_ext.gelu_wild(x)
