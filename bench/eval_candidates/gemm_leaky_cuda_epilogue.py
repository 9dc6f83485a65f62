"""Correct partial replacement, CUDA: torch.mm for the GEMM, one fused kernel for bias + multiply + LeakyReLU."""
# expect: correct
# class: correct_partial
# problem: level2/12_Gemm_Multiply_LeakyReLU.py
# backend: cuda
import torch
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

torch::Tensor bias_scale_leaky(torch::Tensor y, torch::Tensor bias, double multiplier, double slope) {
    TORCH_CHECK(y.is_contiguous() && y.dim() == 2 && bias.numel() == y.size(1), "y (B, N) contiguous, bias (N,)");
    long n = y.numel();
    unsigned int blocks = (unsigned int)((n + 255) / 256);
    bias_scale_leaky_kernel<<<blocks, 256>>>(y.data_ptr<float>(), bias.data_ptr<float>(), n, y.size(1),
                                             (float)multiplier, (float)slope);
    return y;
}
"""
CPP_SRC = "torch::Tensor bias_scale_leaky(torch::Tensor y, torch::Tensor bias, double multiplier, double slope);"

epilogue_ext = load_inline(name="kzb_gemm_leaky_cuda_epilogue", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                           functions=["bias_scale_leaky"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        y = torch.mm(x, self.gemm.weight.t())
        return epilogue_ext.bias_scale_leaky(y, self.gemm.bias, self.multiplier, self.negative_slope)
