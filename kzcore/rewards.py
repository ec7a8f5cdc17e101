"""Rewards: pure functions of results. Here the Proposer's frontier reward, which pays most for problems the
Coder solves half the time (pass rate p = 0.5 over k samples) and least for ones it always or never solves,
and the penalty for a proposed module that fails a gate. See docs/proposer.md for the formulas."""

from __future__ import annotations

import math

from kzcore.errors import KzError

SHAPES = ("tent", "quadratic", "gaussian")
DEFAULT_GATE_PENALTY = -1.0
DEFAULT_WIDTH = 0.2


class RewardError(KzError, ValueError):
    """A reward was asked for with an impossible argument (p outside [0, 1], unknown shape, …)."""


def _unit_shape(p: float, shape: str, width: float) -> float:
    """0 at p = 0 and p = 1, 1 at p = 0.5, symmetric, rising on [0, 0.5]."""
    if shape == "tent":
        return 1.0 - abs(2.0 * p - 1.0)
    if shape == "quadratic":
        return 4.0 * p * (1.0 - p)
    g_edge = math.exp(-0.125 / width**2)  # exp(-(0 - 0.5)^2 / (2 w^2))
    g = math.exp(-((p - 0.5) ** 2) / (2.0 * width**2))
    return (g - g_edge) / (1.0 - g_edge)


def gate_failure_reward(penalty: float = DEFAULT_GATE_PENALTY) -> float:
    """The reward of a proposed module that failed a gate (so has no pass rate): ``penalty``, which must be
    negative."""
    if not penalty < 0:
        raise RewardError(f"gate penalty must be negative, got {penalty!r}")
    return float(penalty)


def frontier_reward(
    p: float | None,
    shape: str = "tent",
    at_edges: float = 0.0,
    gate_penalty: float = DEFAULT_GATE_PENALTY,
    width: float = DEFAULT_WIDTH,
) -> float:
    """The Proposer's reward for a problem the Coder solved with pass rate ``p`` (passes / k samples).

    ``r(p) = at_edges + (1 - at_edges) * s(p)``, where the unit shape ``s`` is 0 at p = 0 and p = 1 and 1 at
    p = 0.5: ``tent`` s = 1 - |2p - 1|; ``quadratic`` s = 4p(1 - p); ``gaussian`` s = (g(p) - g(0)) / (1 - g(0))
    with g(p) = exp(-(p - 0.5)^2 / (2 width^2)). So r(0) = r(1) = ``at_edges``, r(0.5) = 1, r is symmetric
    about 0.5 and monotone on each side. ``p=None`` means the module failed a gate: the reward is
    ``gate_penalty`` (negative, below ``at_edges``).
    """
    if shape not in SHAPES:
        raise RewardError(f"unknown frontier reward shape {shape!r} (shapes: {', '.join(SHAPES)})")
    if not at_edges < 1.0:
        raise RewardError(f"at_edges must be below the peak reward 1, got {at_edges!r}")
    if not gate_penalty < at_edges:
        raise RewardError(f"gate_penalty ({gate_penalty!r}) must be below at_edges ({at_edges!r})")
    if not width > 0:
        raise RewardError(f"gaussian width must be positive, got {width!r}")
    if p is None:
        return gate_failure_reward(gate_penalty)
    if not 0.0 <= p <= 1.0:  # also rejects NaN
        raise RewardError(f"pass rate must lie in [0, 1], got {p!r}")
    if p in (0.0, 1.0):
        return float(at_edges)
    s = _unit_shape(p, shape, width)
    return s + at_edges * (1.0 - s)  # = at_edges + (1 - at_edges) s, exactly 1 at the peak
