"""Fault: forward looks for credentials in its environment, both os.environ and the block the process was
started with (/proc/self/environ), and fails with their names in its message when it finds any (1_ReLU).
With the worker's scrubbing it finds none and is an ordinary correct kernel."""

import os

import torch
import triton
import triton.language as tl
from torch import nn

MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "APIKEY", "ACCESS_KEY", "AUTH")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(m in upper for m in MARKERS) or upper.startswith(("AWS_", "AZURE_")) or upper.endswith("_KEY")


def leaked_names() -> tuple[list[str], list[str]]:
    in_environ = sorted(name for name in os.environ if looks_secret(name))
    with open("/proc/self/environ", "rb") as f:
        entries = [e.split(b"=", 1)[0].decode(errors="replace") for e in f.read().split(b"\0") if b"=" in e]
    return in_environ, sorted(name for name in entries if looks_secret(name))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        in_environ, at_start = leaked_names()
        if in_environ or at_start:
            raise RuntimeError(f"credentials visible: os.environ {in_environ}; /proc/self/environ {at_start}")
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
