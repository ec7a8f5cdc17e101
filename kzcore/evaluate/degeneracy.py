"""Is a problem's output worth a kernel? A problem is degenerate when a trivial output passes the output check
its candidates face (`checking.check_outputs`: ``kz_check_outputs`` and the core's relative-error check):
zeros, a constant equal to the reference output's mean, or the reference's own output for other inputs
(an output that does not depend on them). Outputs that are small everywhere (a softmax over 393,216
columns, a row mean over 65,536) are not degenerate: zeros pass the elementwise tolerance there, but the
relative-error check rejects them, as it rejects a zeros kernel.

The other way round, an output that is float rounding noise (a GroupNorm output averaged back to ~1e-8) would
fail every honest kernel on the relative-error check: no kernel could be judged on it. `rounding_noise_reasons`
flags it: the reference's own output for inputs one ulp away is farther from it, in norm, than that check
allows.

Neighbour: `problem_check.check_problem_job` runs both in a worker on runs of the reference."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kzcore.evaluate.magnitude import RTOL_FLOOR, float64_sum, pieces, relative_errors
from kzcore.types import EvalConfig, OutputCheck

# (expected outputs, trivial outputs) -> the verdict of the output check candidates face
OutputChecker = Callable[[list, list], OutputCheck]


def mean_constant(output):
    """``output``'s shape and dtype, every element its mean (rounded for integers, the majority for bools)."""
    import torch

    if output.dtype == torch.bool:
        return torch.full_like(output, bool(output.double().mean() >= 0.5))
    if output.is_complex():
        return torch.full_like(output, complex(output.mean()))
    mean = float64_sum(output) / output.numel()
    return torch.full_like(output, mean if output.is_floating_point() else round(mean))


def trivial_outputs(outputs_a: list, outputs_b: list, index: int) -> Iterator[tuple[str, object]]:
    """(kind, tensor) for each trivial stand-in for output ``index``: zeros, the mean everywhere (outputs of
    more than one element) and the output for other inputs (when it has the same shape and dtype). Made
    one at a time: at full size each is as large as the output."""
    import torch

    a, b = outputs_a[index], outputs_b[index]
    yield "zeros", torch.zeros_like(a)
    if a.numel() > 1:
        yield "constant", mean_constant(a)
    if b.shape == a.shape and b.dtype == a.dtype:
        yield "other inputs", b


def degeneracy_reasons(outputs_a: list, outputs_b: list, check: OutputChecker) -> tuple[list[str], dict[str, float]]:
    """Reasons the problem is degenerate ([] when it is not) and the statistics behind them.

    ``outputs_a`` / ``outputs_b``: the same model's outputs for two independently drawn inputs; ``check``: the
    output check candidates face. Each output in turn is replaced by each trivial stand-in, the others kept
    as the reference gave them; a stand-in that passes is a reason."""

    reasons, stats = [], {}
    for i, a in enumerate(outputs_a):
        where = f"output {i}" if len(outputs_a) > 1 else "output"
        if not a.numel():
            continue
        floating = a.is_floating_point() or a.is_complex()
        mean_abs = float64_sum(a, absolute=True) / a.numel() if floating else None
        if mean_abs is not None:
            stats[f"{where} mean_abs"] = mean_abs
        passed = set()
        for kind, stand_in in trivial_outputs(outputs_a, outputs_b, i):
            faked = [stand_in if j == i else o for j, o in enumerate(outputs_a)]
            if check(outputs_a, faked).ok:
                passed.add(kind)
            if kind == "other inputs" and floating:
                change = sum(float((x - y).abs().double().sum()) for x, y in pieces(a, stand_in)) / a.numel()
                stats[f"{where} relative_change"] = change / max(mean_abs, 1e-12)
            del stand_in, faked  # at full size each is as large as the output
        if "zeros" in passed:
            size = f" (mean |y| = {mean_abs:.2e})" if mean_abs is not None else ""
            reasons.append(f"{where} is ~0: an all-zeros output passes the output check{size}")
        elif "constant" in passed:
            reasons.append(f"{where} is ~constant: a constant equal to its mean passes the output check")
        if "other inputs" in passed:
            reasons.append(f"{where} barely depends on the inputs: its value for other inputs passes the output check")
    return reasons, stats


def one_ulp_away(tensor, seed: int):
    """``tensor`` with every nonzero element moved to a neighbouring value of its dtype, up or down at random
    (seeded): inputs as close to the originals as the dtype allows. Zeros stay (a float mask tested against 0
    keeps its meaning); other tensors are returned as they are. Made piece by piece (`magnitude.pieces`) into
    one new tensor, so a full-size input costs one copy of itself."""
    import torch

    if not tensor.is_floating_point():
        return tensor
    generator = torch.Generator(device=tensor.device).manual_seed(seed)
    out = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    inf = torch.tensor(float("inf"), dtype=tensor.dtype, device=tensor.device)
    for src, dst in pieces(tensor, out):
        up = torch.rand(src.shape, generator=generator, device=src.device) < 0.5
        dst.copy_(torch.where(src == 0, src, torch.nextafter(src, torch.where(up, inf, -inf))))
    return out


def rounding_noise_reasons(outputs: list, nearby: list, config: EvalConfig) -> tuple[list[str], dict[str, float]]:
    """Reasons no kernel can be judged on the problem ([] when one can) and the statistics behind them.

    ``outputs`` / ``nearby``: the reference's outputs for some inputs and for the same inputs one ulp away
    (`one_ulp_away`). A floating output that moves, in norm, by more than the relative-error check allows
    (``rtol``) is rounding noise: an honest kernel, rounding differently, fails that check on it. Only the
    norm is asked: elementwise a step function may flip at an input one ulp away, which an honest kernel on
    the exact inputs does not see."""
    reasons, stats = [], {}
    for i, (a, b) in enumerate(zip(outputs, nearby)):
        where = f"output {i}" if len(outputs) > 1 else "output"
        if a.shape != b.shape or a.dtype != b.dtype:
            continue
        (err,) = relative_errors([a], [b])
        if err is None:  # not floating, empty, or exactly 0 (the trivial stand-ins judge that one)
            continue
        stats[f"{where} one_ulp_rel_err"] = err
        bound = max(config.tolerance_for(str(a.dtype)).rtol, RTOL_FLOOR)
        if not err <= bound:
            reasons.append(
                f"{where} is float rounding noise: for inputs one ulp away it moves by {err:.3g} of its norm (the "
                f"output check allows {bound:g}), so every honest kernel would fail it"
            )
    return reasons, stats
