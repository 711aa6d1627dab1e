"""Level 1 reduction with indices: torch.min along a dimension returns the values and their positions."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        values, indices = torch.min(x, dim=self.dim)
        return values, indices


batch_size = 128
rows = 4096
cols = 4095


def get_inputs():
    return [torch.randn(batch_size, rows, cols)]


def get_init_inputs():
    return [2]
