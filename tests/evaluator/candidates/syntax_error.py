# expect: compile_error syntax_error
# problem: relu
"""Corpus: does not parse."""
import torch

class ModelNew(torch.nn.Module):
    def forward(self, x)
        return x
