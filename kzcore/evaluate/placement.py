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
    """``count`` placements of one input list, as a sequence: ``placements[j]`` is an input list holding the
    same values in other device memory. With one placement it is ``inputs`` itself; with separate copies
    (``shift_mib`` 0) ``count`` copies, all made before the first is used (`make_copies`); with views, the inputs
    first and then ``count`` - 1 views, each filled with the inputs' values as it is indexed (the views overlap:
    only the one indexed last holds them; see the module's docstring). Non-tensor inputs are passed as they
    are. Iterating yields each placement in turn and drops the copies once it ends."""

    def __init__(self, inputs: list, count: int, shift_mib: float = 0.0):
        self.inputs = inputs
        self.count = max(1, count)
        self.shift = int(shift_mib * MIB)
        self._buffers: list = []
        self._slots: dict | None = None

    def __len__(self) -> int:
        return self.count

    def make_copies(self) -> None:
        """Make the separate copies now, one after another, if they are what is placed and not made yet."""
        from kzcore.evaluate.tensors import clone_inputs

        if self.count > 1 and self.shift <= 0 and not self._buffers:
            self._buffers = [clone_inputs(self.inputs) for _ in range(self.count)]

    def __getitem__(self, j: int) -> list:
        if not 0 <= j < self.count:
            raise IndexError(f"placement {j} of {self.count}")
        if self.count == 1 or (self.shift > 0 and j == 0):
            return self.inputs
        if self.shift <= 0:
            self.make_copies()
            return self._buffers[j]
        return self._view(j)

    def __iter__(self) -> Iterator[list]:
        for j in range(self.count):
            yield self[j]
        self._buffers, self._slots = [], None

    def _view(self, j: int) -> list:
        import torch

        if self._slots is None:
            self._slots = {}
            for i, x in enumerate(self.inputs):
                if isinstance(x, torch.Tensor) and _dense(x):
                    nbytes = x.untyped_storage().nbytes()
                    buffer = torch.empty(nbytes + (self.count - 1) * self.shift, dtype=torch.uint8, device=x.device)
                    self._buffers.append(buffer)
                    self._slots[i] = (x, nbytes, buffer)
        placed = list(self.inputs)
        for i, (x, nbytes, buffer) in self._slots.items():
            start = j * self.shift
            view = buffer[start : start + nbytes].view(x.dtype).as_strided(x.shape, x.stride())
            view.copy_(x)
            placed[i] = view
        return placed


def _dense(x) -> bool:
    """``x`` starts its storage and covers it exactly (so a view with its strides over as many bytes holds
    it). Others (a slice, an expanded tensor) stay where they are: moving them would change their layout."""
    return x.storage_offset() == 0 and x.numel() * x.element_size() == x.untyped_storage().nbytes()
