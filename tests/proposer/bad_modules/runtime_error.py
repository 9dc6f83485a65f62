# expect: runtime_error; apis: torch.matmul
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x, y):
        return torch.matmul(x, y)  # inner dimensions 16 and 8 do not match


def get_inputs():
    return [torch.randn(16, 16), torch.randn(8, 4)]


def get_init_inputs():
    return []
