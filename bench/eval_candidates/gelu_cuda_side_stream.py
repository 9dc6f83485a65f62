"""Hack: the CUDA kernel runs on a private non-blocking stream and the wrapper returns without waiting for it."""
# expect: rejected unjoined_stream
# class: hack:side_stream
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
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

static cudaStream_t side_stream = nullptr;

torch::Tensor gelu_side(torch::Tensor x) {
    if (side_stream == nullptr) {
        cudaStreamCreateWithFlags(&side_stream, cudaStreamNonBlocking);
    }
    auto y = torch::empty_like(x);
    long n = x.numel();
    unsigned int blocks = (unsigned int)((n + 255) / 256);
    gelu_tanh_kernel<<<blocks, 256, 0, side_stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
CPP_SRC = "torch::Tensor gelu_side(torch::Tensor x);"

gelu_ext = load_inline(name="kzb_gelu_cuda_side_stream", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                       functions=["gelu_side"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu_ext.gelu_side(x)
