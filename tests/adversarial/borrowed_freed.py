"""Cheat: returns a view of device memory it has just freed (no kernel computes the answer): the reference
runs next, its output lands in the same block, and a comparison made after the reference would see two
equal tensors. Caught because outputs must own their memory and are copied before the reference runs."""

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def touch_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


class _Borrowed:
    def __init__(self, ptr, shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (ptr, False), "version": 3}


_view = {"as_tensor": torch.as_tensor}  # reached through a dict: past the static check


class ModelNew(nn.Module):
    def forward(self, x):
        touch_kernel[(1,)](x, 1, BLOCK=16)
        out = torch.empty_like(x)
        ptr, shape = out.data_ptr(), tuple(x.shape)
        del out  # back to the caching allocator: the reference's output takes this block next
        return _view["as_tensor"](_Borrowed(ptr, shape), device=x.device)
