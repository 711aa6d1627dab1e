"""Level 3: a pre-norm transformer block (causal attention with a tril buffer, then a tanh-GELU MLP)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class TanhGelu(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Model(nn.Module):
    def __init__(self, width, num_heads, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.ln2 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.act = TanhGelu()
        self.num_heads = num_heads
        self.register_buffer("bias", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

    def attend(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        heads = [z.view(b, t, self.num_heads, c // self.num_heads).transpose(1, 2) for z in (q, k, v)]
        q, k, v = heads
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        scores = scores.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.down(self.act(self.up(self.ln2(x))))


batch_size = 128
context = 1024
seq_len = 512
width = 768
num_heads = 8


def get_inputs():
    return [torch.randn(batch_size, seq_len, width)]


def get_init_inputs():
    return [width, num_heads, context]
