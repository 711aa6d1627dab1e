"""Level 3: multi-head causal self-attention in the minGPT style, its causal mask a registered buffer."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, width, num_heads, context):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.num_heads = num_heads
        self.register_buffer("bias", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.num_heads, c // self.num_heads).transpose(1, 2)
        k = k.view(b, t, self.num_heads, c // self.num_heads).transpose(1, 2)
        v = v.view(b, t, self.num_heads, c // self.num_heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        scores = scores.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).contiguous().view(b, t, c))


batch_size = 128
context = 1024
seq_len = 512
width = 768
num_heads = 8


def get_inputs():
    return [torch.randn(batch_size, seq_len, width)]


def get_init_inputs():
    return [width, num_heads, context]
