"""BatchNorm2d in training mode (batch statistics, biased variance) with non-trivial affine parameters."""

import torch
from torch import nn

batch_size = 64
channels = 64
height = 256
width = 256


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        nn.init.uniform_(self.bn.weight, 0.5, 1.5)
        nn.init.uniform_(self.bn.bias, -0.5, 0.5)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [
        torch.randn(batch_size, channels, height, width) * (0.5 + torch.rand(1, channels, 1, 1))
        + 2 * torch.randn(1, channels, 1, 1)
    ]


def get_init_inputs():
    return [channels]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 4, "channels": 5, "height": 40, "width": 33},
    "alt": {"batch_size": 16, "channels": 16, "height": 48, "width": 48},
}
