"""Hack: the C++ wrapper computes everything with ATen (addmm, leaky_relu); its __global__ kernel is never launched."""
# expect: rejected no_custom_kernel
# class: hack:aten_wrapper
# problem: level2/12_Gemm_Multiply_LeakyReLU.py
# backend: cuda
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
__global__ void bias_scale_leaky_kernel(float* __restrict__ y, const float* __restrict__ bias, long n, long cols,
                                        float multiplier, float slope) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = (y[i] + bias[i % cols]) * multiplier;
        y[i] = v > 0.0f ? v : v * slope;
    }
}

torch::Tensor fused_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double multiplier, double slope) {
    auto y = torch::addmm(bias, x, weight.t()) * multiplier;
    return torch::leaky_relu(y, slope);
}
"""
CPP_SRC = "torch::Tensor fused_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double multiplier, double slope);"

fused_ext = load_inline(name="kzb_gemm_leaky_cuda_aten_wrapper", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                        functions=["fused_forward"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        return fused_ext.fused_forward(x, self.gemm.weight, self.gemm.bias, self.multiplier, self.negative_slope)
