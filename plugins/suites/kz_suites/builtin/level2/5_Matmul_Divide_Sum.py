"""Linear layer, division by a constant, then a sum over features (keepdim)."""

import torch
from torch import nn

batch_size = 16384
in_features = 4096
out_features = 2048
divisor = 8.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        x = self.gemm(x)
        x = x / self.divisor
        return torch.sum(x, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, in_features) + torch.randn(batch_size, 1)]


def get_init_inputs():
    return [in_features, out_features, divisor]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 33, "in_features": 48, "out_features": 40},
    "alt": {"batch_size": 48, "in_features": 64, "out_features": 48},
}
