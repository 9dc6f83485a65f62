# expect: api_not_called:torch.nn.functional.gelu; apis: torch.relu, torch.nn.functional.gelu
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mentions F.gelu and torch.nn.functional.gelu in text, but only ever calls relu."""

    def forward(self, x):
        name = "torch.nn.functional.gelu"  # F.gelu(x) is never called
        return torch.relu(x) if name else F.gelu(x)


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
