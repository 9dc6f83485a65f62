# expect: correct ok
# problem: relu
"""CUDA corpus: a correct CUDA C++ ReLU whose wrapper uses pybind11 (from torch/extension.h): built again as written."""
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
    py::gil_scoped_release no_gil;  // other Python threads may run during the launch
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="kz_cuda_needs_frontend", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"])

class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x.contiguous())
