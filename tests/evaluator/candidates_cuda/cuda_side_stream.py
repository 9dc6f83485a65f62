# expect: rejected unjoined_stream
# problem: relu_large
"""CUDA corpus: the work runs on a side stream with no sync back: rejected by the stream-order check (timing still includes its work)."""
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
    auto y = torch::empty_like(x);
    long n = x.numel();
    auto side = at::cuda::getStreamFromPool();
    relu_kernel<<<(n + 255) / 256, 256, 0, side.stream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="kz_cuda_side_stream", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"])

class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x.contiguous())
