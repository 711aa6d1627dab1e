"""Level 1 loss: the mean hinge loss of scores against +-1 labels."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, scores, labels):
        return torch.mean(torch.clamp(1 - scores * labels, min=0))


batch_size = 32768
features = 32768


def get_inputs():
    labels = torch.randint(0, 2, (batch_size, features)).float() * 2 - 1
    return [torch.randn(batch_size, features), labels]


def get_init_inputs():
    return []
