# expect: import_error; apis: torch.relu
import torch
import torch.nn as nn
import torch.nn.functional as F

import kernelzero_no_such_module


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
