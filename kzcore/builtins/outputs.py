"""Default output comparison: count, plain-tensor type, shape, dtype, device, no broadcast views, finiteness,
then elementwise tolerance."""

from __future__ import annotations

import math

from kzcore import hookimpl
from kzcore.evaluate import magnitude
from kzcore.types import OutputCheck


def broadcast_dims(t) -> set[int]:
    """Dimensions of size > 1 with stride 0: one stored row repeated (``expand``), not computed elements."""
    return {d for d, (size, stride) in enumerate(zip(t.shape, t.stride())) if size > 1 and stride == 0}


def compare(expected, actual, config, summarise=None) -> OutputCheck:
    """The check. ``summarise(e, a, atol, rtol)``, where given, may answer the elementwise fast path for a
    floating output in one pass: (elements outside, max abs error, max relative error, ``||a - e||``,
    ``||e||`` over the elements where ``e`` is finite), or None to leave that output to the torch passes here
    (kz_triton's one-pass GPU check answers this way). The norms it gives ride on the verdict
    (``OutputCheck.norms``) for the core's relative-error check."""
    import torch

    if len(expected) != len(actual):
        return OutputCheck(False, f"returned {len(actual)} outputs, expected {len(expected)}")
    worst_abs = worst_rel = 0.0
    norms: list[tuple[float, float] | None] = []
    for i, (e, a) in enumerate(zip(expected, actual)):
        norms.append(None)
        where = f"output {i}" if len(expected) > 1 else "output"
        if type(a) not in (torch.Tensor, torch.nn.Parameter):  # subclasses can be lazy or lie
            return OutputCheck(False, f"{where} is {type(a).__name__}, expected a plain torch.Tensor")
        if a.shape != e.shape:
            return OutputCheck(False, f"{where} has shape {tuple(a.shape)}, expected {tuple(e.shape)}")
        if a.dtype != e.dtype:
            return OutputCheck(False, f"{where} has dtype {a.dtype}, expected {e.dtype}")
        if a.device != e.device:
            return OutputCheck(False, f"{where} is on {a.device}, expected {e.device}")
        repeated = sorted(broadcast_dims(a) - broadcast_dims(e))
        if repeated:
            return OutputCheck(
                False, f"{where} is a broadcast view (stride 0 in dim(s) {repeated}): compute and store every element"
            )
        if not (e.is_floating_point() or e.is_complex()):
            mismatched = int((a != e).sum())
            if mismatched:
                return OutputCheck(
                    False, f"{where}: {mismatched} of {e.numel()} elements differ (exact match required)"
                )
            continue
        tol = config.tolerance_for(str(e.dtype))
        if not e.numel():
            continue
        # fp32 arithmetic is exact enough against any tolerance >= 1e-6 and halves the memory traffic
        wide = e.dtype if e.dtype == torch.float64 or e.is_complex() else torch.float32
        summary = summarise(e, a, tol.atol, tol.rtol) if summarise is not None and not e.is_complex() else None
        if summary is not None:
            n_out, max_abs, max_rel, err_norm, ref_norm = summary
            if math.isfinite(ref_norm) and ref_norm >= magnitude.FP32_NORM_FLOOR:
                norms[-1] = (err_norm, ref_norm)
        else:
            n_out, max_abs, max_rel = _fast(e.to(wide), a.to(wide), tol)
        # Fast path: every element within tolerance. NaN anywhere fails it (a NaN compares false, so it is never
        # within); so does an infinite error, which an infinite reference element's bound would let through
        if n_out == 0 and math.isfinite(max_abs):
            worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
            continue
        norms[-1] = None
        verdict = _exact(where, e.to(wide), a.to(wide), tol, worst_abs, worst_rel)
        if not verdict.ok:
            return verdict
        worst_abs, worst_rel = verdict.max_abs_err, verdict.max_rel_err
    return OutputCheck(True, "", worst_abs, worst_rel, norms=tuple(norms))


compare_outputs = compare  # its public name (``kzcore.compare_outputs``): a plugin's check built on the default


def _fast(e_w, a_w, tol) -> tuple[float, float, float]:
    """(elements outside tolerance, max abs error, max relative error) in one device sync; piece by piece
    (`magnitude.pieces`) and in place where a temporary allows, since the checked timed pairs run this on every
    checked output and a full-size output's temporaries must not take several times its memory."""
    import torch

    counts, abs_maxes, rel_maxes = [], [], []
    for e, a in magnitude.pieces(e_w, a_w):
        diff = (a - e).abs() if e.is_complex() else (a - e).abs_()  # a complex abs is real: not in place
        size = e.abs()
        counts.append((diff <= size.mul(tol.rtol).add_(tol.atol)).logical_not_().sum())
        abs_maxes.append(diff.max())
        rel_maxes.append((diff / size.clamp_min_(tol.atol)).max())
        del diff, size
    if len(counts) > 1:
        counts, abs_maxes, rel_maxes = (
            [torch.stack(counts).sum()],
            [torch.stack(abs_maxes).max()],
            [torch.stack(rel_maxes).max()],
        )
    # the count as a float: exact up to 2**24 and never 0 when some element is out
    n_out, max_abs, max_rel = torch.stack([counts[0].to(abs_maxes[0].dtype), abs_maxes[0], rel_maxes[0]]).tolist()
    return n_out, max_abs, max_rel


def _exact(where: str, e_w, a_w, tol, worst_abs: float, worst_rel: float) -> OutputCheck:
    """The slow path, for outputs with elements outside tolerance or non-finite, piece by piece
    (`magnitude.pieces`): NaN where the reference has none fails; matching infinities and NaN where the
    reference has NaN count as equal."""
    import torch

    bad_nans, abs_maxes, rel_maxes, overs = [], [], [], []
    for e, a in magnitude.pieces(e_w, a_w):
        bad_nans.append((torch.isnan(a) & ~torch.isnan(e)).sum())
        diff = (a - e).abs()
        both_inf = torch.isinf(e) & (a == e)
        diff.masked_fill_(both_inf | (torch.isnan(e) & torch.isnan(a)), 0)
        abs_maxes.append(diff.max())
        rel_maxes.append(torch.nan_to_num(diff / e.abs().clamp_min(tol.atol), nan=0.0, posinf=float("inf")).max())
        # an infinite reference element is matched only by the same infinity (inf <= atol + rtol * inf is True)
        overs.append(((diff > tol.atol + tol.rtol * e.abs()) | (torch.isinf(e) & ~both_inf)).sum())
        del diff, both_inf
    bad_nan = int(torch.stack(bad_nans).sum())
    if bad_nan:
        return OutputCheck(False, f"{where} has {bad_nan} NaN values where the reference has none")
    max_abs = float(torch.stack(abs_maxes).max())
    worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, float(torch.stack(rel_maxes).max()))
    over = int(torch.stack(overs).sum())
    if over:
        return OutputCheck(
            False,
            f"{where}: {over} of {e_w.numel()} elements outside atol={tol.atol:g} rtol={tol.rtol:g} "
            f"(max abs err {max_abs:.3g})",
            worst_abs,
            worst_rel,
        )
    return OutputCheck(True, "", worst_abs, worst_rel)


@hookimpl(trylast=True)
def kz_check_outputs(expected, actual, config):
    return compare(expected, actual, config)


kz_check_outputs.elementwise = True  # its rule is elementwise: the timed pairs' spot checks apply (evaluate/spots)
