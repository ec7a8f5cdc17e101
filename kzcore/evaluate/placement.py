"""Where the timed inputs lie: a kernel's speed can depend on the device memory its inputs are given, so the
timing stage times each side on several placements of the same values and keeps the mean of the
per-placement medians. Neighbours: `timing` (the stage that uses it), ``bench/timing_truth.py`` (the ground
truth, measured over the same placements).

Why (an H200, ``bench/placement_probe.py``): 22_MatVec's Triton candidate (1024 programs each reading 16 rows
128 KiB apart) runs ~0.48 ms on every other allocation of its 2 GiB input and ~0.55 ms on the rest, also when an
allocation is freed and the same virtual address comes back (so it is the physical memory), in any process and
under any timer, while its cuBLAS reference stays within 0.3 %. Timed on one allocation its speedup moved by
5.4 % from one evaluator worker to the next; over 8 placements by 0.6-0.9 %.

The copies of one side are made together, before any is timed, and after the other side's (`placements_for`):
on a quiet driver consecutive allocations of one size take consecutive device memory, so a side's copies cover
one span of it evenly. Made one reference copy, one candidate copy in turn, every candidate copy would fall on
every other block, and one job's 22_MatVec copies would be all slow or all fast.

Two ways to place (``EvalConfig.placement_shift_mib``):

- 0: separate copies, all of them made before the first is timed and kept alive until the last is (each is new
  device memory); the inputs themselves are not timed, only their copies. Their number is capped so the copies
  take at most ``MEMORY_FRACTION`` of the free device memory; where fewer than two fit, the inputs as they are.
- N > 0: one buffer per tensor, N MiB longer per extra placement; placement j is a view at byte offset
  j * N MiB, the values copied in just before it is timed (the views overlap, so only one is live at a time).
  Costs N MiB per placement and tensor, whatever the input's size; but on the H200 offsets of 64 KiB to
  256 MiB inside one allocation left 22_MatVec's speed as it was (0.65 % CV), so there views do not sample
  what separate copies do.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

MIB = 1 << 20
MEMORY_FRACTION = 0.25  # separate copies take at most this share of the free device memory


def tensor_bytes(inputs: list) -> int:
    import torch

    return sum(x.untyped_storage().nbytes() for x in inputs if isinstance(x, torch.Tensor))


def placement_count(requested: int, shift_mib: float, input_bytes: int, free_bytes: int | None) -> int:
    """How many placements to time: ``requested``, fewer when separate copies (``shift_mib`` 0) of
    ``input_bytes`` (both sides together) would take more than ``MEMORY_FRACTION`` of ``free_bytes``; 1 (the
    inputs as they are) where fewer than two copies fit."""
    if requested <= 1 or input_bytes <= 0:
        return 1
    if shift_mib > 0 or free_bytes is None:
        return requested
    copies = min(requested, int(MEMORY_FRACTION * free_bytes // input_bytes))
    return copies if copies >= 2 else 1


def placements_for(requested: int, shift_mib: float, device: str, *sides: list) -> list[Placements]:
    """Each input list's placements, as many for every one: ``requested`` on a GPU, fewer where separate copies
    of all of them would take too much of the free device memory (`placement_count`); 1 off a GPU. Separate
    copies are made here, one side's all together and then the next side's (see the module's docstring)."""
    count = requested if device == "cuda" else 1
    if count > 1 and shift_mib <= 0:
        import torch

        free = torch.cuda.mem_get_info()[0]
        count = placement_count(count, shift_mib, sum(tensor_bytes(inputs) for inputs in sides), free)
    placed = [Placements(inputs, count, shift_mib) for inputs in sides]
    for side in placed:
        side.make_copies()
    return placed


class Placements:
    """``count`` placements of one input list. Iterating yields input lists, one per placement, holding the
    same values in other device memory: with one placement ``inputs`` itself; with separate copies
    (``shift_mib`` 0) ``count`` copies, all made before the first is yielded (`make_copies`); with views, the
    inputs first and then ``count`` - 1 views (see the module's docstring). Non-tensor inputs are passed as
    they are. The copies are dropped once the iteration ends."""

    def __init__(self, inputs: list, count: int, shift_mib: float = 0.0):
        self.inputs = inputs
        self.count = max(1, count)
        self.shift = int(shift_mib * MIB)
        self._buffers: list = []

    def __len__(self) -> int:
        return self.count

    def make_copies(self) -> None:
        """Make the separate copies now, one after another, if they are what is placed and not made yet."""
        from kzcore.evaluate.tensors import clone_inputs

        if self.count > 1 and self.shift <= 0 and not self._buffers:
            self._buffers = [clone_inputs(self.inputs) for _ in range(self.count)]

    def __iter__(self) -> Iterator[list]:
        if self.count == 1:
            yield self.inputs
            return
        if self.shift <= 0:
            self.make_copies()
            yield from self._buffers
        else:
            yield self.inputs
            yield from self._views()
        self._buffers = []

    def _views(self) -> Iterator[list]:
        import torch

        slots = {}
        for i, x in enumerate(self.inputs):
            if isinstance(x, torch.Tensor) and _dense(x):
                nbytes = x.untyped_storage().nbytes()
                buffer = torch.empty(nbytes + (self.count - 1) * self.shift, dtype=torch.uint8, device=x.device)
                self._buffers.append(buffer)
                slots[i] = (x, nbytes, buffer)
        for j in range(1, self.count):
            placed = list(self.inputs)
            for i, (x, nbytes, buffer) in slots.items():
                start = j * self.shift
                view = buffer[start : start + nbytes].view(x.dtype).as_strided(x.shape, x.stride())
                view.copy_(x)
                placed[i] = view
            yield placed


def _dense(x) -> bool:
    """``x`` starts its storage and covers it exactly (so a view with its strides over as many bytes holds
    it). Others (a slice, an expanded tensor) stay where they are: moving them would change their layout."""
    return x.storage_offset() == 0 and x.numel() * x.element_size() == x.untyped_storage().nbytes()


def per_placement(config, count: int, index: int = 0):
    """``config`` for placement ``index`` of ``count``: the repetitions and the time budget shared among them.
    The GPU is settled and the calls warmed up once per timing, on the first placement; the placements after it
    run back to back on a GPU the timing keeps busy, so each gets one warm-up pair (its new addresses) and no
    settling wait."""
    import attrs

    if count <= 1:
        return config
    shared = attrs.evolve(
        config,
        reps=max(1, math.ceil(config.reps / count)),
        min_reps=max(1, math.ceil(config.min_reps / count)),
        max_timing_s=config.max_timing_s / count,
    )
    if index == 0:
        return shared
    return attrs.evolve(shared, settle_ms=0.0, warmup=min(config.warmup, 1))
