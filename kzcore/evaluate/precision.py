"""The precision policy: an fp32 problem accepts a kernel whose error is of TF32 class (the reference run on
operands rounded to TF32's 10-bit mantissa, what ``torch.backends.cuda.matmul.allow_tf32`` and Triton's default
``tl.dot`` give), not one of bf16 or fp16-operand class, whose error the elementwise tolerance alone lets
through on many problems while it runs several times faster.

The bar is the problem's own: on the trial's inputs the reference is run twice more, once on every fp32
operand (inputs, parameters and buffers) rounded to TF32 and once rounded to bf16; each run's relative L2 error
against the exact reference measures what that precision costs on this problem. A candidate passes when its
own relative L2 error is below the geometric mean of the two (bf16's unit roundoff is 8x TF32's, so the bar is
~2.8x the TF32 error and ~1/2.8 of bf16's). A candidate with an error below ``FP32_CLASS`` needs no extra run.

Neighbour: `trials` calls `check` on the first trial of a problem whose floating outputs are all fp32."""

from __future__ import annotations

import copy
import math

FP32_CLASS = 1e-5  # relative L2 error at or below this is fp32 arithmetic (reordered sums), never checked further


def rel_l2(actual: list, expected: list) -> float:
    """sqrt(sum |a - e|^2 / sum |e|^2) over every floating output's elements where the reference is finite (0
    when the reference is 0); each output's norms by `magnitude.error_norms`, summed in float64."""
    import torch

    from kzcore.evaluate.magnitude import error_norms

    num = den = 0.0
    for a, e in zip(actual, expected):
        if not (isinstance(e, torch.Tensor) and e.is_floating_point()):
            continue
        err, norm = error_norms(e, a)
        num += err * err
        den += norm * norm
    return math.sqrt(num / den) if den > 0 else 0.0


def fp32_problem(expected: list, inputs: list) -> bool:
    """Every floating output and input is fp32 (and there is at least one floating output)."""
    import torch

    floats = [t for t in (*expected, *inputs) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    outs = [t for t in expected if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return bool(outs) and all(t.dtype == torch.float32 for t in floats)


def round_tf32(x):
    """``x`` (fp32) rounded to nearest on TF32's 10-bit mantissa, kept in fp32."""
    import torch

    bits = x.contiguous().view(torch.int32)
    rounded = (bits + 0x1000) & ~0x1FFF
    finite = torch.isfinite(x)
    return torch.where(finite, rounded.view(torch.float32).view(x.shape), x)


def round_bf16(x):
    import torch

    return x.to(torch.bfloat16).to(torch.float32)


def _rounded_model(model, rounding):
    import torch

    twin = copy.deepcopy(model)
    with torch.no_grad():
        for t in (*twin.parameters(), *twin.buffers()):
            if t.dtype == torch.float32:
                t.copy_(rounding(t))
    return twin


def _rounded_inputs(inputs: list, rounding) -> list:
    import torch

    return [rounding(x) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x for x in inputs]


def bars(run_reference, model, inputs: list, expected: list) -> tuple[float, float]:
    """(TF32 error, bf16 error): the reference's relative L2 error with every fp32 operand rounded to each."""
    errors = []
    for rounding in (round_tf32, round_bf16):
        outputs = run_reference(_rounded_model(model, rounding), _rounded_inputs(inputs, rounding))
        errors.append(rel_l2(outputs, expected))
    return errors[0], errors[1]


def bar(tf32: float, bf16: float) -> float:
    """The error an fp32 problem accepts: the geometric mean of its TF32 and bf16 errors (the TF32 one at least
    1/64 of bf16's, so a problem TF32 rounding leaves exact still has a bar below bf16's)."""
    return math.sqrt(max(tf32, bf16 / 64) * bf16)


def verdict(error: float, tf32: float, bf16: float) -> str:
    """A message when ``error`` is beyond TF32 class on this problem ("" when it passes)."""
    if error <= FP32_CLASS or bf16 <= 0:
        return ""
    limit = bar(tf32, bf16)
    if error <= limit:
        return ""
    return (
        f"computes below the problem's precision: relative L2 error {error:.2e}, where operands rounded to TF32 "
        f"give {tf32:.2e} and to bf16 {bf16:.2e}; an fp32 problem accepts TF32-class error (up to {limit:.2e}), "
        "so keep fp32 (or TF32) operands"
    )
