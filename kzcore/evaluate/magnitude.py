"""Tolerance relative to the output's own size. Elementwise ``|a - e| <= atol + rtol*|e|`` lets any output
whose elements are all below ``atol`` pass as zeros (KernelBench's 393,216-wide softmax rows are ~2.5e-6
each), so every floating output must also be close as a whole: ``||a - e|| <= rtol * ||e||`` (2-norms over
the elements where the reference is finite). A kernel whose error is small only because the output is small
fails; a correct kernel loses nothing, since meeting ``rtol`` elementwise implies it in norm.

Neighbour: `trials.trial` (a pipeline stage) runs it after ``kz_check_outputs`` passed."""

from __future__ import annotations

import math

import attrs

from kzcore.types import EvalConfig, OutputCheck

RTOL_FLOOR = 1e-6  # a configured rtol of 0 still allows float noise


PIECE_ELEMENTS = 1 << 22  # elements a comparison of full-size outputs handles at a time (`pieces`)


def pieces(*tensors):
    """The tensors (all of one shape) flattened, in matching slices of at most ``PIECE_ELEMENTS`` elements.
    A comparison made piece by piece keeps each temporary to one slice: made whole, the temporaries of a 7 GiB
    output (float64 copies, differences, masks) took more than an 80 GiB GPU held."""
    flat = [t.detach().reshape(-1) for t in tensors]
    step = PIECE_ELEMENTS
    for start in range(0, flat[0].numel(), step):
        yield tuple(f[start : start + step] for f in flat)


def float64_sum(tensor, absolute: bool = False) -> float:
    """The sum of a real ``tensor``'s elements (of any tensor's magnitudes, with ``absolute``) in float64,
    piece by piece (`pieces`), so no float64 copy of the whole tensor is made."""
    total = 0.0
    for (piece,) in pieces(tensor):
        total += float((piece.abs() if absolute else piece).double().sum())
    return total


FP32_NORM_FLOOR = 1e-6  # below this reference norm an fp32 sum of squares may have lost elements to underflow


def error_norms(e, a) -> tuple[float, float]:
    """(``||a - e||``, ``||e||``) over the elements where the reference ``e`` is finite. In fp32 for outputs of
    32 bits or fewer: the output check of every trial and checked timed pair makes this, and fp64 doubles its
    memory traffic; the norms' rounding (~1e-6 relative) is far below any bound they are held to. Squares leave
    fp32's range above ~1.8e19 and below ~1e-19, so a reference norm that overflowed or came out under
    ``FP32_NORM_FLOOR`` is computed again in fp64 (an error norm that overflowed next to a finite reference norm
    fails any bound either way). float64 and complex128 outputs are computed in their own precision."""
    import torch

    if e.dtype in (torch.float64, torch.complex128):
        wide = e.dtype
    else:
        wide = torch.complex64 if e.is_complex() else torch.float32
    e_w, a_w = e.detach().to(wide), a.detach().to(wide)
    finite = torch.isfinite(e_w)
    if not bool(finite.all()):
        e_w, a_w = torch.where(finite, e_w, 0), torch.where(finite, a_w, 0)
    ref = float(torch.linalg.vector_norm(e_w))
    if wide in (torch.float32, torch.complex64) and not (math.isfinite(ref) and ref >= FP32_NORM_FLOOR):
        wider = torch.complex128 if e.is_complex() else torch.float64
        e_w, a_w = e_w.to(wider), a_w.to(wider)
        ref = float(torch.linalg.vector_norm(e_w))
    return float(torch.linalg.vector_norm(a_w - e_w)), ref


def relative_errors(expected: list, actual: list, known=()) -> list[float | None]:
    """``||a - e|| / ||e||`` per output (None: not floating, empty, or a reference of exact zeros), over the
    elements where the reference is finite (`error_norms`). ``known``: (``||a - e||``, ``||e||``) per output
    where the elementwise check already computed them (`OutputCheck.norms`), None elsewhere."""
    import torch

    out: list[float | None] = []
    for i, (e, a) in enumerate(zip(expected, actual)):
        if not (isinstance(e, torch.Tensor) and (e.is_floating_point() or e.is_complex()) and e.numel()):
            out.append(None)
            continue
        err, norm = (known[i] if i < len(known) else None) or error_norms(e, a)
        out.append(err / norm if norm > 0 else None)
    return out


def check_relative_error(expected: list, actual: list, config: EvalConfig, passed: OutputCheck) -> OutputCheck:
    """``passed`` (an elementwise check that passed) unless some output's error norm exceeds
    ``rtol * ||reference||``; then a failed check that says so."""
    for i, (e, err) in enumerate(zip(expected, relative_errors(expected, actual, passed.norms))):
        if err is None:
            continue
        bound = max(config.tolerance_for(str(e.dtype)).rtol, RTOL_FLOOR)
        if not err <= bound:  # NaN fails too
            where = f"output {i}" if len(expected) > 1 else "output"
            return attrs.evolve(
                passed,
                ok=False,
                message=(
                    f"{where}: error norm is {err:.3g} of the reference's norm (at most {bound:g}): every element "
                    f"is within atol only because the output is small (reference mean |y| = "
                    f"{float(e.detach().abs().double().nan_to_num(0, 0, 0).mean()):.3g})"
                ),
            )
    return passed
