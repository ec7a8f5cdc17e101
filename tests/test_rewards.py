"""The Proposer's frontier reward and the gate-failure reward: pinned values for each shape at the pass
rates k = 4 samples can give, the edge value, errors, and property tests of the shape (peak at 0.5,
symmetric, monotone on each side, bounded, above the gate penalty)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kzcore.errors import KzError
from kzcore.rewards import SHAPES, RewardError, frontier_reward, gate_failure_reward

P_OF_4 = (0.0, 0.25, 0.5, 0.75, 1.0)


@pytest.mark.parametrize(
    "shape, expected",
    [
        ("tent", (0.0, 0.5, 1.0, 0.5, 0.0)),
        ("quadratic", (0.0, 0.75, 1.0, 0.75, 0.0)),
        # (exp(-0.0625 / 0.08) - exp(-3.125)) / (1 - exp(-3.125)) at p = 0.25
        ("gaussian", (0.0, 0.432917, 1.0, 0.432917, 0.0)),
    ],
)
def test_pinned_values_at_k4(shape, expected):
    got = [frontier_reward(p, shape=shape) for p in P_OF_4]
    assert got == pytest.approx(expected, abs=1e-6)


def test_pinned_values_between_the_k4_points():
    assert frontier_reward(0.1) == pytest.approx(0.2)
    assert frontier_reward(0.9, shape="quadratic") == pytest.approx(0.36)
    assert frontier_reward(0.4, shape="gaussian", width=0.1) == pytest.approx(
        (math.exp(-0.5) - math.exp(-12.5)) / (1 - math.exp(-12.5))
    )


def test_edge_value_is_configurable_and_the_shape_rescales_to_it():
    assert frontier_reward(0.0, at_edges=-0.2) == -0.2
    assert frontier_reward(1.0, at_edges=-0.2) == -0.2
    assert frontier_reward(0.5, at_edges=-0.2) == 1.0
    assert frontier_reward(0.25, at_edges=-0.2) == pytest.approx(-0.2 + 1.2 * 0.5)
    assert frontier_reward(1e-9, at_edges=0.3) == pytest.approx(0.3, abs=1e-6)  # continuous at the edges


def test_gate_failure_reward():
    assert gate_failure_reward() == -1.0
    assert gate_failure_reward(-0.5) == -0.5
    assert frontier_reward(None) == -1.0
    assert frontier_reward(None, gate_penalty=-3.0) == -3.0
    with pytest.raises(RewardError, match="must be negative"):
        gate_failure_reward(0.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"p": 1.5}, r"must lie in \[0, 1\]"),
        ({"p": -0.1}, r"must lie in \[0, 1\]"),
        ({"p": float("nan")}, r"must lie in \[0, 1\]"),
        ({"p": 0.5, "shape": "cosine"}, "unknown frontier reward shape 'cosine'"),
        ({"p": 0.5, "at_edges": 1.0}, "below the peak"),
        ({"p": 0.5, "at_edges": -0.5, "gate_penalty": -0.5}, "must be below at_edges"),
        ({"p": 0.5, "shape": "gaussian", "width": 0.0}, "width must be positive"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(RewardError, match=message):
        frontier_reward(**kwargs)
    assert issubclass(RewardError, KzError)


unit = st.floats(0.0, 1.0, allow_nan=False)
shapes = st.sampled_from(SHAPES)
edges = st.floats(-0.9, 0.9, allow_nan=False)  # above the default gate penalty -1
widths = st.floats(0.05, 2.0, allow_nan=False)
EPS = 1e-9


@given(p=unit, shape=shapes, at_edges=edges, width=widths)
def test_peak_at_one_half_and_bounded(p, shape, at_edges, width):
    r = frontier_reward(p, shape=shape, at_edges=at_edges, width=width)
    peak = frontier_reward(0.5, shape=shape, at_edges=at_edges, width=width)
    assert peak == 1.0
    assert at_edges - EPS <= r <= 1.0 + EPS
    assert r > frontier_reward(None, gate_penalty=min(at_edges, 0.0) - 0.1, at_edges=at_edges)
    if 0.05 <= abs(p - 0.5) <= 0.45 and (shape != "gaussian" or width >= 0.1):  # strict away from float limits
        assert at_edges < r < peak


@given(p=unit, shape=shapes, at_edges=edges, width=widths)
def test_symmetric_about_one_half(p, shape, at_edges, width):
    kw = {"shape": shape, "at_edges": at_edges, "width": width}
    assert frontier_reward(p, **kw) == pytest.approx(frontier_reward(1.0 - p, **kw), abs=1e-9)


@given(a=unit, b=unit, shape=shapes, at_edges=edges, width=widths)
def test_monotone_on_each_side(a, b, shape, at_edges, width):
    kw = {"shape": shape, "at_edges": at_edges, "width": width}
    lo, hi = sorted((a, b))
    if hi <= 0.5:  # rising toward the peak
        assert frontier_reward(lo, **kw) <= frontier_reward(hi, **kw) + EPS
    if lo >= 0.5:  # falling after it
        assert frontier_reward(lo, **kw) >= frontier_reward(hi, **kw) - EPS
