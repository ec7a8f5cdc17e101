"""Cheat: imports the problem's own reference module from the builtin suite (kz_suites) by file path
(importlib, no kzcore import) and runs its `Model` in forward (1_ReLU)."""

import importlib.util
from pathlib import Path

import torch
import triton
import triton.language as tl
from torch import nn

_suite = Path(importlib.util.find_spec("kz_suites").origin).parent / "builtin" / "level1"
_spec = importlib.util.spec_from_file_location("relu_reference", _suite / "1_ReLU.py")
_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_reference)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ref = _reference.Model()

    def forward(self, x):
        y = self.ref(x)
        out = torch.empty_like(y)
        copy_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        return out
