# expect: rejected no_custom_kernel
# problem: relu
# via: build
"""Sandbox: a C++ extension built ahead in the build sandbox (g++, CPU) and loaded by the job without a rebuild; the CPU path cannot see C++ kernels."""
import os
import time

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

STARTED = time.time()
SOURCE = r'''
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] > 0 ? in[i] : 0.0f;
  return y;
}
'''
ext = load_inline("kz_sandbox_relu", cpp_sources=SOURCE, functions=["relu"])
REBUILT = os.path.getmtime(ext.__file__) >= STARTED  # in the job: True only if load_inline compiled it again


class ModelNew(nn.Module):
    def forward(self, x):
        if REBUILT:
            raise RuntimeError("the extension was built again when the job loaded it")
        return ext.relu(x)
