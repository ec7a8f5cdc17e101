"""Fault: forward deletes its working directory (the worker's scratch dir, its own source file and the
worker's log with it), then does its work correctly (1_ReLU)."""

import os
import shutil

import torch
import triton
import triton.language as tl
from torch import nn

DONE = []


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
        # once: later forwards of the same job have no working directory left to delete. Only a kz worker's
        # scratch dir is ever deleted: if a broken clean slate left the worker elsewhere (a previous fault's
        # chdir("/")), deleting the cwd would delete the machine; the probe then reports the wrong cwd.
        if not DONE:
            cwd = os.getcwd()
            if os.path.basename(cwd).startswith("kz-worker") and cwd.count(os.sep) >= 2:
                shutil.rmtree(cwd)
            DONE.append(True)
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
