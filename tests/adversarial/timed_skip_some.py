"""Cheat: ReLU that computes in its correctness trials and on most placements of the timed inputs, but on
three of the eight (told apart by the input's address: each placement is a fixed buffer, refilled in place)
hands back the buffer of its last computed output once it sees it is timed (a new allocation not NaN-filled).
The timing keeps the mean of the placements' medians, so that mean falls by about 3/8 (a speedup near 1.6x, under
`implausible_speedup`: nothing re-verifies it). With the drawn checks alone (10 % of pairs, and the last) a
33-pair timing skips in about 12 pairs, none drawn in 0.9^12 = 28 % of timings, and the last pair lands on a
computed placement 5/8 of the time: about one timing in six accepted. Caught by the spot checks every timed
pair gets (kzcore/evaluate/spots.py) in the first pair it skips in. Needs several placements: GPU only."""

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


SKIPPED = {1, 3, 5}  # placements, in the order the timer first hands them over
PROBE = 262151  # elements of an allocation of its own size class, read to tell a trial from a timed call


def _being_timed(like) -> bool:
    """The op guard fills a fresh allocation with NaN in the trials (and the free cache is NaN-filled there), not
    in the timed calls: a number in a new allocation means a timer. The probe is zeroed after the read, so the
    same block comes back zeroed, not with a trial's NaN."""
    probe = torch.empty(PROBE, device=like.device)
    value = probe[0].item()
    probe.zero_()
    return value == value


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None
        self.placements: list[int] = []

    def forward(self, x):
        if self.last is not None and self.last.shape == x.shape and _being_timed(x):
            if x.data_ptr() not in self.placements:
                self.placements.append(x.data_ptr())
            if self.placements.index(x.data_ptr()) in SKIPPED:
                return self.last
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        self.last = out
        return out
