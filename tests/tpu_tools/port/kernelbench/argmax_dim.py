"""Level 1 arg-reduction: the index of the largest element along a dimension."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.argmax(x, dim=self.dim)


batch_size = 128
rows = 4096
cols = 4095


def get_inputs():
    return [torch.randn(batch_size, rows, cols)]


def get_init_inputs():
    return [1]
