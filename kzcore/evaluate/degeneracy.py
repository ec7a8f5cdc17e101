"""Is a problem's output worth a kernel? Pure checks on reference outputs for two different inputs: an
output that is ~0, ~constant, or barely changes with its inputs lets a trivial kernel pass."""

from __future__ import annotations

from kzcore.types import EvalConfig


def degeneracy_reasons(outputs_a: list, outputs_b: list, config: EvalConfig) -> tuple[list[str], dict[str, float]]:
    """Reasons the outputs are degenerate ([] when they are not) and the statistics behind them.

    ``outputs_a`` / ``outputs_b``: the same model's outputs for two independently drawn inputs."""
    import torch

    reasons, stats = [], {}
    for i, (a, b) in enumerate(zip(outputs_a, outputs_b)):
        where = f"output {i}" if len(outputs_a) > 1 else "output"
        if not (a.is_floating_point() or a.is_complex()):
            if a.numel() > 1 and bool((a == a.reshape(-1)[0]).all()):
                reasons.append(f"{where} is constant")
            continue
        tol = config.tolerance_for(str(a.dtype))
        x = a.double()
        mean_abs = float(x.abs().mean()) if x.numel() else 0.0
        stats[f"{where} mean_abs"] = mean_abs
        if mean_abs < 1e-3:
            reasons.append(f"{where} is ~0 (mean |y| = {mean_abs:.2e})")
        elif torch.allclose(torch.zeros_like(x), x, atol=tol.atol, rtol=tol.rtol):
            reasons.append(f"{where}: an all-zeros output is within tolerance")
        elif x.numel() > 1 and torch.allclose(torch.full_like(x, float(x.mean())), x, atol=tol.atol, rtol=tol.rtol):
            reasons.append(f"{where} is ~constant (a constant equal to its mean passes)")
        if a.shape == b.shape:
            y = b.double()
            change = float((x - y).abs().mean() / max(mean_abs, 1e-12))
            stats[f"{where} relative_change"] = change
            if torch.allclose(x, y, atol=tol.atol, rtol=tol.rtol):
                reasons.append(f"{where} barely depends on the inputs (two random inputs give the same output)")
    return reasons, stats
