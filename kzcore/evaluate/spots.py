"""Every timed pair's outputs compared at positions nobody can predict.

The full output check runs on a drawn share of the timed pairs and on the last one (`kzcore.timed`), so a
candidate that skips its work on some timed calls (or reuses an earlier output) escapes with the probability
that no checked pair lands on a skipped call: skipping every pair on 3 of the 8 placements, about one timing in
six (tests/adversarial/timed_skip_some.py). A `SpotCheck` closes that gap at a small cost: right after each
call of every pair, before the other side runs, it copies the outputs' values at ``count`` positions drawn for
that pair (from a generator seeded by the operating system's randomness), and compares them by the elementwise
rule of the trials' checker (each within ``atol + rtol * |expected|``, integers exact, NaN where the reference
has NaN and equal infinities accepted), never stricter than it. A stale or skipped output differs at nearly
every position, so the pair it happens in is named. The values are kept on the device and compared together,
all pairs of an output at once, by `verify` after the timer returns (a few kernels and one read per timing).
Every candidate output is also refused at once if it does not own its memory.

Neighbours: `kzcore.timed.TimedRounds` calls ``begin``/``take``/``end``/``verify``; `kzcore.evaluate.timing`
builds one when every registered output checker is elementwise (its function has ``elementwise = True``)."""

from __future__ import annotations

import random

from kzcore.errors import TimedCheckFailed
from kzcore.evaluate.tensors import NotOwned, require_owned

SPOTS = 1024  # positions per output per pair: a call that left 1 % of its output stale is caught at 99.997 %


def _plain(t) -> bool:
    import torch

    return type(t) in (torch.Tensor, torch.nn.Parameter)


def gather(t, positions):
    """``t``'s values at the flat (row-major) ``positions``, copied into new memory."""
    import torch

    if t.is_contiguous():
        return t.reshape(-1).index_select(0, positions)
    return t[torch.unravel_index(positions, t.shape)]  # advanced indexing copies


def outside(expected, actual, tolerance):
    """How many of ``actual``'s values fail the elementwise rule against ``expected``, per row of the last
    dimension (a 0-d tensor for 1-d values)."""
    import torch

    if not (expected.is_floating_point() or expected.is_complex()):
        return (actual != expected).sum(-1)
    wide = expected.dtype if expected.dtype == torch.float64 or expected.is_complex() else torch.float32
    e, a = expected.to(wide), actual.to(wide)
    diff = (a - e).abs()
    both_inf = torch.isinf(e) & (a == e)
    within = (diff <= tolerance.atol + tolerance.rtol * e.abs()) & ~torch.isinf(e)
    within |= both_inf | torch.isnan(e)
    return within.logical_not_().sum(-1)


class SpotCheck:
    """Spot checks of one timing's pairs. ``tolerance_for(dtype_name)`` gives the checker's tolerance."""

    def __init__(self, tolerance_for, count: int = SPOTS, seed: int | None = None):
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        self.tolerance_for, self.count = tolerance_for, count
        self.seed = seed if seed is not None else random.SystemRandom().getrandbits(63)
        self._generators: dict = {}
        self._positions: dict[int, object] = {}
        self._taken: dict[str, tuple[list, list]] = {}
        self._where: list[str] = []  # each kept pair's place, in order
        self._groups: list[int] = []  # each kept pair's placement
        # per placement, after `verify`: (relative L2 error of the candidate's floating values against the
        # reference's where those are finite, how many values): what the precision policy reads while timed
        self.errors: dict[int, tuple[float, int]] = {}
        # placements whose every floating output was compared whole in every pair (an output of at most `count`
        # values): their error is the outputs' exact error, with no sampling noise, however few values it has
        self.whole: set[int] = set()
        self._kept: dict[tuple, list] = {}  # per output (index, dtype, values, device): (pair, expected, actual)
        self._sampled: set[int] = set()  # placements with a floating output of more than `count` values
        self.compared = 0

    def _draw(self, i: int, t):
        """Positions for output ``i`` in this pair: every element of a small output, else ``count`` drawn."""
        import torch

        n = t.numel()
        if n <= self.count:
            return torch.arange(n, device=t.device)
        positions = self._positions.get(i)
        if positions is None or positions.device != t.device:
            gen = self._generators.get(t.device)
            if gen is None:
                gen = self._generators[t.device] = torch.Generator(device=t.device)
                gen.manual_seed(self.seed)
            positions = torch.randint(n, (self.count,), device=t.device, generator=gen)
            self._positions[i] = positions
        return positions

    def begin(self) -> None:
        self._positions, self._taken = {}, {}

    def take(self, side: str, outputs: list) -> None:
        """Right after ``side``'s call, before anything else runs: its outputs' values at this pair's positions
        (none where its outputs differ in number, shape, dtype or device from the other side's, taken first)."""
        if side == "candidate":
            try:
                require_owned(outputs)
            except NotOwned as exc:
                raise TimedCheckFailed(f"a timed call: {exc}") from None
        layout = [(tuple(t.shape), t.dtype, t.device) if _plain(t) else type(t).__name__ for t in outputs]
        other = next((taken for s, taken in self._taken.items() if s != side), None)
        if other is not None and other[1] != layout:
            self._taken[side] = ([None] * len(outputs), layout)
            return
        values = [gather(t, self._draw(i, t)) if _plain(t) and t.numel() else None for i, t in enumerate(outputs)]
        self._taken[side] = (values, layout)

    def end(self, where: str, group: int = 0) -> None:
        """Keep the pair's values for `verify`; raises `TimedCheckFailed` at once where the outputs differ in
        number, shape, dtype or device (known on the host). ``group``: the pair's placement, for `errors`."""
        if len(self._taken) < 2:
            return  # a timer that handed over one side only: the full check's own error says so
        (ref, ref_layout), (cand, cand_layout) = self._taken["reference"], self._taken["candidate"]
        self._taken = {}
        if ref_layout != cand_layout:
            raise TimedCheckFailed(
                f"{where}: the candidate's outputs ({_describe(cand_layout)}) differ in number, shape, dtype or device "
                f"from the reference's ({_describe(ref_layout)}), though its correctness trials passed"
            )
        pair = len(self._where)
        self._where.append(where)
        self._groups.append(group)
        for entry in ref_layout:  # the outputs' own sizes (what was kept is at most `count` values of each)
            if not isinstance(entry, str) and entry[1].is_floating_point and _numel(entry[0]) > self.count:
                self._sampled.add(group)
        for i, (e, a) in enumerate(zip(ref, cand)):
            if e is not None:
                self._kept.setdefault((i, e.dtype, e.numel(), e.device), []).append((pair, e, a))

    def verify(self) -> str:
        """Compare every kept pair, each output's values of all pairs at once (one read per output): a message
        naming the first pair with values outside, else "". Fills `errors`."""
        import torch

        places, groups, kept, sampled = self._where, self._groups, self._kept, self._sampled
        self._where, self._groups, self._kept, self._sampled = [], [], {}, set()
        self.compared += len(places)
        totals = [0] * len(places)
        sums: dict[int, list[float]] = {}
        for (_i, dtype, _n, _device), rows in kept.items():
            expected, actual = torch.stack([e for _, e, _ in rows]), torch.stack([a for _, _, a in rows])
            columns = [outside(expected, actual, self.tolerance_for(str(dtype))).double()]
            if expected.is_floating_point():
                columns += _error_sums(expected, actual)
            for (pair, _, _), row in zip(rows, torch.stack(columns, dim=1).tolist()):
                totals[pair] += int(row[0])
                if len(row) > 1:
                    acc = sums.setdefault(groups[pair], [0.0, 0.0, 0.0])
                    for k in range(3):
                        acc[k] += row[k + 1]
        self.errors = {g: ((err / norm) ** 0.5 if norm > 0 else 0.0, int(n)) for g, (err, norm, n) in sums.items()}
        self.whole = set(self.errors) - sampled
        for n, place in zip(totals, places):
            if n:
                return (
                    f"{place}: the candidate's output differs from the reference's on the same inputs at {n} of the "
                    f"positions compared right after its call (up to {self.count} per output), though its "
                    "correctness trials passed (work skipped or reused while timed?)"
                )
        return ""


def _numel(shape: tuple) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


def _error_sums(expected, actual) -> list:
    """Per row: the sum of squared errors and of squared reference values where the reference is finite (and
    how many such values), in float64."""
    import torch

    e, a = expected.double(), actual.double()
    finite = torch.isfinite(e)
    err = torch.where(finite, (a - e) ** 2, 0.0).sum(-1)
    return [err, torch.where(finite, e * e, 0.0).sum(-1), finite.sum(-1).double()]


def _describe(layout: list) -> str:
    return (
        ", ".join(
            x if isinstance(x, str) else f"{list(x[0])} {str(x[1]).replace('torch.', '')} on {x[2]}" for x in layout
        )
        or "none"
    )


__all__ = ["SPOTS", "SpotCheck", "gather", "outside"]
