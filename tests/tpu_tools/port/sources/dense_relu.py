"""A small source for the --check tests: y = relu(x @ W^T + b) @ V^T (two Linear layers)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d, bias=False)

    def forward(self, x):
        y = torch.relu(self.fc1(x))
        return self.fc2(y)


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64, 48]
