"""Level 1 activations: a leaky ReLU clipped by a hard tanh, elementwise over a wide batch."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, slope):
        super().__init__()
        self.slope = slope

    def forward(self, x):
        return F.hardtanh(F.leaky_relu(x, self.slope), min_val=-0.5, max_val=0.5)


batch_size = 4096
features = 393216


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [0.05]
