"""GPU problem: y = relu(x) on 4096 x 65536 fp32 (1 GiB each way), the size the timed-call hack of issue 26 gained on."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096, 65536)]


def get_init_inputs():
    return []
