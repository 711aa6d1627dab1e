"""Level 1 softmax family: log-softmax along the last dimension of a wide activation."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log_softmax(x, dim=1)


batch_size = 4096
features = 393216


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return []
