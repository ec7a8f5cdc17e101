"""Fault: forward allocates host memory without end, 1 GiB at a time (1_ReLU). The chunks are calloc'd and
never touched, and the loop refuses to start unless the worker has a memory limit, so running this fault
without the limit cannot hurt the machine it runs on; with the limit it must end in MemoryError."""

import resource

import torch
import triton
import triton.language as tl
from torch import nn

CHUNK = 1 << 30


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


def memory_limit() -> int:
    """The worker's memory cap in bytes (address space or data segment), 0 when it has none."""
    caps = [resource.getrlimit(which)[0] for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA)]
    caps = [cap for cap in caps if cap != resource.RLIM_INFINITY and cap > 0]
    return min(caps) if caps else 0


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        limit = memory_limit()
        if not 0 < limit < 1 << 40:
            raise RuntimeError(f"host_oom: the worker has no usable memory limit ({limit}); not allocating")
        hoard = []
        for _ in range(limit // CHUNK + 2):
            hoard.append(bytes(CHUNK))
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
