# expect: non_deterministic; apis: torch.relu
import torch
import torch.nn as nn
import torch.nn.functional as F

import random


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * random.random()  # Python's RNG is not seeded by torch.manual_seed


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
