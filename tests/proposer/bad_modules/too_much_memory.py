# expect: too_much_memory; apis: torch.relu
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        big = torch.ones(3 * 2**30 // 4)  # 3 GiB, over the test's 0.5 GiB bound
        return torch.relu(x) + big[0]


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
