"""The default output check (kzcore.builtins.outputs.compare): its one-sync fast path and the exact slow path
for non-finite values must agree on every verdict."""

from __future__ import annotations

import pytest
import torch

from kzcore.builtins.outputs import compare
from kzcore.types import EvalConfig

INF, NAN = float("inf"), float("nan")
REF = torch.tensor([1.0, INF, NAN, 2.0])


@pytest.mark.parametrize(
    "actual, ok",
    [
        ([1.0, INF, NAN, 2.0], True),  # same infinity, NaN where the reference has NaN
        ([1.005, INF, NAN, 2.0], True),  # within tolerance next to non-finite elements
        ([1.0, -INF, NAN, 2.0], False),  # the opposite infinity
        ([1.0, 5.0, NAN, 2.0], False),  # a finite value where the reference is infinite
        ([NAN, INF, NAN, 2.0], False),  # NaN where the reference is finite
        ([1.0, INF, NAN, 2.5], False),  # out of tolerance
    ],
)
def test_non_finite_reference_elements(actual, ok):
    check = compare([REF], [torch.tensor(actual)], EvalConfig())
    assert check.ok is ok, check.message


def test_fast_path_reports_worst_errors_and_rejects_nan():
    e = torch.linspace(1.0, 2.0, 1000)
    a = e.clone()
    a[10] += 0.005
    check = compare([e], [a], EvalConfig())
    assert check.ok and check.max_abs_err == pytest.approx(0.005, rel=1e-3)
    assert check.max_rel_err == pytest.approx(0.005 / e[10].item(), rel=1e-3)
    a[20] = NAN
    check = compare([e], [a], EvalConfig())
    assert not check.ok and "NaN" in check.message


def test_infinite_actual_against_finite_reference_fails():
    e = torch.ones(8)
    a = e.clone()
    a[3] = INF
    assert not compare([e], [a], EvalConfig()).ok


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.complex64])
def test_dtypes_pass_when_equal_and_fail_when_off(dtype):
    e = (torch.randn(256) + 3).to(dtype)
    assert compare([e], [e.clone()], EvalConfig()).ok
    assert not compare([e], [e * 1.5], EvalConfig()).ok


def test_one_element_out_of_tolerance_fails_among_more_than_fp32_can_count():
    """The fast path counts elements out of tolerance as a float: one among 2**24 + 8 must still fail, and one
    NaN must too."""
    e = torch.zeros(2**24 + 8)
    a = e.clone()
    a[-1] = 1.0
    check = compare([e], [a], EvalConfig())
    assert not check.ok and "1 of 16777224 elements outside" in check.message
    a[-1] = float("nan")
    assert not compare([e], [a], EvalConfig()).ok


def test_inputs_are_compared_bit_for_bit_without_copies():
    """The trials' check that a forward left its inputs alone: a copy nothing wrote is unchanged, NaNs and
    strided views included; any write, even -0.0 over 0.0, is a change."""
    from kzcore.evaluate.tensors import changed_inputs, same_bits

    x = torch.randn(4, 6)
    x[0, 0] = NAN
    y = x.clone()
    assert same_bits(x, y) and same_bits(x.t(), y.t()) and same_bits(x[:, ::2], y[:, ::2])
    assert same_bits(x.bfloat16(), x.bfloat16()) and same_bits(torch.arange(5), torch.arange(5))
    z = torch.complex(x, x)
    assert same_bits(z, z.clone())
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not same_bits(x, x.double()) and not same_bits(x, x[:2])
    y[1, 1] += 1
    assert changed_inputs([x, 3, torch.arange(3)], [y, 3, torch.arange(3)]) == [0]
