"""Fully connected layer (nn.Linear with bias): y = x @ W.T + b."""

import torch
from torch import nn

batch_size = 4096
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 64, "in_features": 40, "out_features": 48},
    "alt": {"batch_size": 80, "in_features": 48, "out_features": 64},
}
