"""Correctness-trial inputs beyond the problem's own distribution, so a kernel cannot pass by assuming what
``get_inputs()`` happens to draw (non-negative values, unit scale, no offset). Trial 0 keeps the problem's
inputs; every later trial flips the sign and changes the scale of each floating input (mode "scale") and, in
mode "full", also shifts it or redraws it from another distribution with the same mean and spread. Integer
and bool tensors (indices, targets, masks) and non-tensor inputs are never touched. A problem narrows this
with a module attribute ``KZ_INPUT_VARIATION`` ("none" | "positive" | "scale" | "full").

Neighbours: `trials.trial` (a pipeline stage) calls `plan`, `vary`, `describe`, `magnitudes` and `varied_config`."""

from __future__ import annotations

import math
import random
from types import ModuleType

import attrs

from kzcore.errors import ProblemFormatError

CONFIG_MODES = ("none", "scale", "full")
PROBLEM_MODES = ("none", "positive", "scale", "full")  # least to most freedom
PROBLEM_ATTR = "KZ_INPUT_VARIATION"
# Fractions of the log-scale range that consecutive varied trials draw from, so that four varied trials
# always include a large, a small and two middling scales rather than whatever the dice give.
STRATA = ((0.75, 1.0), (0.0, 0.25), (0.5, 0.75), (0.25, 0.5))
HALF_MAX_SCALE = 10.0  # fp16 overflows at 65504: larger factors would make the reference itself infinite
REDRAWS = ("uniform", "laplace")


@attrs.frozen
class Change:
    """What one trial does to one floating input: ``scale * x``, then ``+ shift * std`` or, with ``redraw``,
    a fresh draw of that distribution with the scaled tensor's mean and standard deviation."""

    scale: float = 1.0
    shift: float = 0.0
    redraw: str = ""

    @property
    def identity(self) -> bool:
        return self == Change()


def problem_mode(module: ModuleType) -> str:
    """The variation a problem allows: its ``KZ_INPUT_VARIATION``, or "full" when it sets none."""
    mode = getattr(module, PROBLEM_ATTR, "full")
    if mode not in PROBLEM_MODES:
        raise ProblemFormatError(f"{PROBLEM_ATTR} = {mode!r}: expected one of {', '.join(PROBLEM_MODES)}")
    return mode


def effective_mode(config_mode: str, module: ModuleType) -> str:
    """The stricter of the configured mode and what the problem allows ("positive" keeps the sign)."""
    if config_mode not in CONFIG_MODES:
        raise ValueError(f"input_variation={config_mode!r}: expected one of {', '.join(CONFIG_MODES)}")
    return min(config_mode, problem_mode(module), key=PROBLEM_MODES.index)


def plan(mode: str, seed: int, trial: int, count: int, decades: float, salt: int = 0) -> list[Change]:
    """The change to each of ``count`` inputs in trial ``trial`` (0: none). Deterministic in (seed, trial, the
    evaluation's secret ``salt``):
    odd trials negate (unless "positive"), magnitudes are ``10**u`` with ``u`` in [-decades, decades],
    stratified across trials; in "full" mode every third trial also shifts and every third redraws."""
    if mode == "none" or trial == 0 or decades < 0:
        return [Change()] * count
    # str seeds hash with sha512: the same in every process
    rng = random.Random(f"kz-inputs:{seed}:{trial}" + (f":{salt}" if salt else ""))
    k = trial - 1
    low, high = STRATA[k % len(STRATA)]
    sign = -1.0 if mode != "positive" and k % 2 == 0 else 1.0
    changes = []
    for _ in range(count):
        scale = sign * 10.0 ** (decades * (2.0 * rng.uniform(low, high) - 1.0))
        shift, redraw = 0.0, ""
        if mode == "full" and k % 3 == 1:
            shift = rng.choice((-1.0, 1.0)) * rng.uniform(0.5, 2.0)
        if mode == "full" and k % 3 == 2:
            redraw = rng.choice(REDRAWS)
        changes.append(Change(scale, shift, redraw))
    return changes


def vary(inputs: list, changes: list[Change], seed: int) -> tuple[list, dict[int, Change]]:
    """``inputs`` with each floating tensor changed as planned (new tensors; the originals are untouched),
    and the changes applied by input position. Redraws use their own generator, so the global RNG stream
    is the same whatever the mode."""
    import torch

    out, applied = [], {}
    for i, (x, change) in enumerate(zip(inputs, changes)):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() and not change.identity:
            with torch.no_grad():
                x = _changed(x.detach(), change, seed * 64 + i)
            applied[i] = change
        out.append(x)
    return out + list(inputs[len(changes) :]), applied


def describe(applied: dict[int, Change]) -> str:
    """What a trial did to its inputs, for the model reading the verdict: "input 0 x-37.2, input 1 x0.05"."""
    parts = []
    for i, c in sorted(applied.items()):
        text = f"input {i} x{c.scale:.3g}"
        if c.shift:
            text += f" shifted {c.shift:+.2g} std"
        if c.redraw:
            text += f" redrawn from a {c.redraw} distribution"
        parts.append(text)
    return ", ".join(parts)


def _changed(x, change: Change, seed: int):
    import torch

    scale = change.scale
    if x.dtype == torch.float16:
        scale = math.copysign(min(abs(scale), HALF_MAX_SCALE), scale)
    y = x * scale  # keeps x's layout
    if not (change.shift or change.redraw):
        return y
    wide = y.double() if y.dtype == torch.float64 else y.float()
    mean = wide.mean()
    std = wide.std() if wide.numel() > 1 else wide.abs().mean()
    if change.redraw:
        g = torch.Generator(device=x.device).manual_seed(seed)
        u = torch.rand(x.shape, generator=g, device=x.device, dtype=wide.dtype)
        if change.redraw == "uniform":
            z = (2.0 * u - 1.0) * math.sqrt(3.0)  # mean 0, std 1
        else:
            c = u - 0.5  # inverse CDF of a Laplace distribution with std 1
            z = -torch.sign(c) * torch.log1p(-2.0 * c.abs()).clamp_min(-30.0) / math.sqrt(2.0)
        out = torch.empty_like(x)
        out.copy_(mean + std * z)
        return out
    return y + (change.shift * std).to(y.dtype)


def magnitudes(outputs: list) -> list[float]:
    """Mean absolute value of each floating output's finite elements (0.0 for other outputs)."""
    import torch

    sizes = []
    for y in outputs:
        if isinstance(y, torch.Tensor) and y.is_floating_point() and y.numel():
            # one read, no temporaries (every trial asks this of each reference output); the sum is not finite
            # only where an element is not, or it left fp32's range: then the finite elements' mean in fp64
            wide = torch.float64 if y.dtype == torch.float64 else torch.float32
            total = float(torch.linalg.vector_norm(y.detach(), 1, dtype=wide))
            if not math.isfinite(total):
                a = y.detach().abs().nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
                total = float(a.sum(dtype=torch.float64))
            sizes.append(total / y.numel())
        else:
            sizes.append(0.0)
    return sizes


def varied_config(config, base: list[float], now: list[float]):
    """``config`` with ``atol`` scaled by how much larger the outputs are than in the unvaried trial, so a
    varied trial is exactly as strict, relative to the outputs' size, as trial 0 (never stricter)."""
    ratios = [n / b for b, n in zip(base, now) if b > 0 and math.isfinite(n)]
    ratio = max(ratios, default=1.0)
    return config if ratio <= 1.0 else attrs.evolve(config, atol=config.atol * ratio)
