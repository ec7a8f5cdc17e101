"""2-D convolution, 3x3 kernel, stride 2, no padding, no bias (nn.Conv2d)."""

import torch
from torch import nn

batch_size = 16
in_channels = 128
out_channels = 128
height = 256
width = 256


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=2, padding=0, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 11, "width": 10},
    "alt": {"batch_size": 16, "in_channels": 16, "out_channels": 16, "height": 16, "width": 16},
}
