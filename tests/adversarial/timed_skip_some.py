"""Cheat: ReLU that computes in its correctness trials and in two of every three timed calls, but in every
third (once a timer is on the call stack) hands back the buffer of its last computed output. With a 10 %
share of drawn checks a skip in one call of three goes unchecked in about one timing of five, and its speedup
stays under `implausible_speedup`, so nothing re-verifies it. Caught by the spot checks every timed pair gets
(kzcore/evaluate/spots.py) in the first pair it skips in."""

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
        self.timed_calls = 0

    def forward(self, x):
        if self.last is not None and self.last.shape == x.shape and _being_timed():
            self.timed_calls += 1
            if self.timed_calls % 3 == 0:
                return self.last
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        self.last = out
        return out
