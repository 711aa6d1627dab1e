"""Level 1 attention: scaled dot-product attention of query, key and value heads."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


batch_size = 32
heads = 32
seq_len = 1024
head_size = 128


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, head_size) for _ in range(3)]


def get_init_inputs():
    return []
