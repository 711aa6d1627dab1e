import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x @ torch.ones(3, 3)  # (4, 8) @ (3, 3): the source breaks on its own, here (line 7)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
