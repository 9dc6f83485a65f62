# expect: syntax_error; apis: torch.relu
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x)
        return torch.relu(x)
