"""Cheat: ReLU that computes in its correctness trials but, once a timer is on the call stack (a frame named
like the timer's functions), skips the kernel and hands back the buffer of its last computed output.
Refused by the static check (`traceback`, a way to the evaluator's frames); past it, every timed pair runs on
new input contents and timed pairs' outputs are checked (the last pair always): the stale buffer holds the
previous inputs' answer."""

import traceback

import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


TIMER_FRAMES = {"timing", "kz_time_candidate", "time_cuda", "untimed_pairs", "timed", "pair"}


def _being_timed() -> bool:
    return any(frame.name in TIMER_FRAMES for frame in traceback.extract_stack())


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None

    def forward(self, x):
        if self.last is not None and self.last.shape == x.shape and _being_timed():
            return self.last
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        self.last = out
        return out
