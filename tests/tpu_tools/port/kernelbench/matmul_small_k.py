"""Level 1 matmul variant: a tall-skinny product with a small inner dimension, C = A @ B."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


rows = 16384
cols = 16384
inner = 64


def get_inputs():
    return [torch.rand(rows, inner), torch.rand(inner, cols)]


def get_init_inputs():
    return []
