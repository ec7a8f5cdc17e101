"""Linear layer followed by a softmax over the output features."""

import torch
from torch import nn

batch_size = 16384
in_features = 4096
out_features = 1024


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.gemm(x)
        return torch.softmax(x, dim=1)


def get_inputs():
    return [8.0 * torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 33, "in_features": 48, "out_features": 40},
    "alt": {"batch_size": 48, "in_features": 64, "out_features": 48},
}
