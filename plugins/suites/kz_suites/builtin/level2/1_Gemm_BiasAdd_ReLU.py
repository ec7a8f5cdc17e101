"""Linear layer without bias, then a separate bias add and ReLU."""

import torch
from torch import nn

batch_size = 8192
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        x = self.gemm(x)
        x = x + self.bias
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


# "alt": a second shape for one more trial, so a kernel that hard-codes the tested shape fails.
KZ_SIZES = {
    "small": {"batch_size": 33, "in_features": 48, "out_features": 40},
    "alt": {"batch_size": 48, "in_features": 64, "out_features": 48},
}
