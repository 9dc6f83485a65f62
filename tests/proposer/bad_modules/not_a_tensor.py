# expect: runtime_error; apis: torch.relu
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return float(torch.relu(x).sum())


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
