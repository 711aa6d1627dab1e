"""Level 3: a multi-layer perceptron built from a list of hidden sizes (Linear + ReLU, then Linear)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        layers = []
        width = input_size
        for h in layer_sizes:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, output_size))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


batch_size = 128
input_size = 16384
hidden = 32768
output_size = 8192


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, [hidden, hidden], output_size]
