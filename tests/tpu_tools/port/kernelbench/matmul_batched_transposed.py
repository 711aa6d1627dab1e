"""Level 1 matmul variant: a batched product with the second operand transposed, C = A @ B^T."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b.transpose(1, 2))


batch_size = 128
m = 512
n = 1024
reduce_len = 2048


def get_inputs():
    return [torch.rand(batch_size, m, reduce_len), torch.rand(batch_size, n, reduce_len)]


def get_init_inputs():
    return []
