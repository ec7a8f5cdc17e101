"""Fault: forward sends data over TCP to 127.0.0.1:PORT (a server the test starts; the test writes its port
here), then does its work correctly (1_ReLU). http.client is not refused by the static check, so only the
worker's network fence stands between the candidate and the server."""

import http.client

import torch
import triton
import triton.language as tl
from torch import nn

PORT = 9  # the discard port; tests/test_faults.py and bench/faults.py put their own server's port here


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=5)
        connection.request("POST", "/", body=b"kz-leak: the candidate reached the network")
        connection.close()
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
