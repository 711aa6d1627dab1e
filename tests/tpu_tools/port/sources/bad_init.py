import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8, 8, 8]  # one too many: Model takes d only
