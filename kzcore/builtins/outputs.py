"""Default output comparison: count, plain-tensor type, shape, dtype, device, no broadcast views, finiteness,
then elementwise tolerance."""

from __future__ import annotations

from kzcore import hookimpl
from kzcore.types import OutputCheck


def broadcast_dims(t) -> set[int]:
    """Dimensions of size > 1 with stride 0: one stored row repeated (``expand``), not computed elements."""
    return {d for d, (size, stride) in enumerate(zip(t.shape, t.stride())) if size > 1 and stride == 0}


def compare(expected, actual, config) -> OutputCheck:
    import torch

    if len(expected) != len(actual):
        return OutputCheck(False, f"returned {len(actual)} outputs, expected {len(expected)}")
    worst_abs = worst_rel = 0.0
    for i, (e, a) in enumerate(zip(expected, actual)):
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
        # fp32 arithmetic is exact enough against any tolerance >= 1e-6 and halves the memory traffic
        wide = e.dtype if e.dtype == torch.float64 or e.is_complex() else torch.float32
        e64, a64 = e.to(wide), a.to(wide)
        bad_nan = torch.isnan(a64) & ~torch.isnan(e64)
        if bad_nan.any():
            return OutputCheck(False, f"{where} has {int(bad_nan.sum())} NaN values where the reference has none")
        diff = (a64 - e64).abs()
        both_inf = torch.isinf(e64) & (a64 == e64)
        diff = torch.where(both_inf | (torch.isnan(e64) & torch.isnan(a64)), torch.zeros_like(diff), diff)
        if diff.numel():
            worst_abs = max(worst_abs, float(diff.max()))
            rel = diff / e64.abs().clamp_min(tol.atol)
            worst_rel = max(worst_rel, float(rel.max()))
        over = diff > tol.atol + tol.rtol * e64.abs()
        if over.any():
            n = int(over.sum())
            return OutputCheck(
                False,
                f"{where}: {n} of {e.numel()} elements outside atol={tol.atol:g} rtol={tol.rtol:g} "
                f"(max abs err {float(diff.max()):.3g})",
                worst_abs,
                worst_rel,
            )
    return OutputCheck(True, "", worst_abs, worst_rel)


@hookimpl(trylast=True)
def kz_check_outputs(expected, actual, config):
    return compare(expected, actual, config)
