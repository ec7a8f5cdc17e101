"""2-D average pooling, kernel 3, stride 1, padding 1, count_include_pad=True (nn.AvgPool2d)."""

import torch
from torch import nn

batch_size = 16
channels = 64
height = 512
width = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=3, stride=1, padding=1)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 2, "channels": 3, "height": 11, "width": 17},
    "alt": {"batch_size": 16, "channels": 16, "height": 16, "width": 32},
}
