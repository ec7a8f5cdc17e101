"""Fault: a candidate that writes into a cache kzcore, a policy or the trainer reads (TARGET, the test's: the
problem-check reports, the converted model, the Hugging Face cache, ~/.cache, the shared Triton cache, the
kzcore cache, the home directory). ACTION says how: a new file, a new directory, a symlink, an existing file
(EXISTING) appended to, renamed, removed or hard-linked into the scratch directory to be written there. With
ACTION "own-cache" it instead puts an entry into its own Triton cache, which must work. Either way it then
computes 1_ReLU correctly."""

import os

import torch
import triton
import triton.language as tl
from torch import nn
from triton.runtime.cache import get_cache_manager

TARGET = ""
ACTION = ""
EXISTING = "existing.json"


def act():
    new, old = os.path.join(TARGET, "planted"), os.path.join(TARGET, EXISTING)
    if ACTION == "create":
        with open(new, "w") as f:
            f.write("written from a candidate")
    elif ACTION == "mkdir":
        os.makedirs(os.path.join(new, "deeper"))
    elif ACTION == "symlink":
        os.symlink("/etc/hostname", new)
    elif ACTION == "append":
        with open(old, "a") as f:
            f.write("tampered")
    elif ACTION == "replace":
        os.replace(old, old + ".moved")
    elif ACTION == "remove":
        os.remove(old)
    elif ACTION == "hardlink":
        os.link(old, "stolen.json")  # into the working directory, which is writable
        with open("stolen.json", "a") as f:
            f.write("tampered")
    elif ACTION == "own-cache":
        # the compiler cache a candidate does need: it must land in this worker's own, and work
        get_cache_manager("6b7a" * 16).put(b"compiled by a candidate", "own-cache-probe.bin")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        act()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
