"""kz_triton's one-pass output check: the same verdicts as the core's torch check on the cases that decide a
check (in Triton's CPU interpreter, in a fresh interpreter since Triton reads its mode at first import), and
what keeps a candidate from steering it."""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

from kz_triton import check

AGREEMENT = textwrap.dedent(
    """
    import json, math
    import torch
    from kz_triton import check
    from kzcore.builtins.outputs import compare, _fast
    from kzcore.evaluate.checking import check_outputs
    from kzcore.evaluate import magnitude
    from kzcore.types import EvalConfig

    class Pm:  # a plugin manager whose kz_check_outputs is the compare under test
        def __init__(self, summarise):
            self.hook = type("H", (), {"kz_check_outputs": staticmethod(
                lambda expected, actual, config: compare(expected, actual, config, summarise=summarise))})()

    def flat(e, a, atol, rtol):  # the kernel over the flat outputs, as summarise would hand them
        return check.summary(e.contiguous().view(-1), a.contiguous().view(-1), atol, rtol)

    torch.manual_seed(0)
    config = EvalConfig()
    n = check.BLOCK * 2 + 77  # a partial last block
    e = torch.randn(n)
    small = torch.softmax(torch.randn(3, 4096), dim=1).view(-1)
    cases = {
        "passing": (e, e + 1e-4 * torch.randn(n)),
        "one_out": (e, e.clone().index_put_((torch.tensor([n // 2]),), torch.tensor(9.0))),
        "nan": (e, e.clone().index_put_((torch.tensor([5]),), torch.tensor(float("nan")))),
        "inf_ref_finite_out": (e.clone().index_put_((torch.tensor([7]),), torch.tensor(float("inf"))), e.clone()),
        "same_inf": (e.clone().index_put_((torch.tensor([7]),), torch.tensor(float("inf"))),
                     e.clone().index_put_((torch.tensor([7]),), torch.tensor(float("inf")))),
        "small_zeros": (small, torch.zeros_like(small)),
        "huge": (e * 1e20, e * 1e20 * (1 + 1e-5)),
        "half": (e.half(), (e + 1e-3).half()),
        "bf16_out": (e.bfloat16(), (e + 0.5).bfloat16()),
    }
    out = {}
    for name, (ref, cand) in cases.items():
        torch_verdict = check_outputs(Pm(None), [ref], [cand], config)
        fused_verdict = check_outputs(Pm(flat), [ref], [cand], config)
        tol = config.tolerance_for(str(ref.dtype))
        s = flat(ref, cand, tol.atol, tol.rtol)
        err, norm = magnitude.error_norms(ref, cand)
        fast = _fast(ref.float(), cand.float(), tol)
        out[name] = {
            "maxima": [s[1], s[2]], "torch_maxima": list(fast[1:]),
            "same_count": s[0] == fast[0],
            "torch": torch_verdict.ok, "fused": fused_verdict.ok, "message": fused_verdict.message,
            "torch_message": torch_verdict.message, "n_out": s[0],
            "norm_rel": abs(s[4] - norm) / norm if norm and math.isfinite(norm) and math.isfinite(s[4]) else None,
            "err_rel": abs(s[3] - err) / err if err and math.isfinite(err) and math.isfinite(s[3]) else None,
        }
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def agreement():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", AGREEMENT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_one_pass_check_gives_the_torch_checks_verdict_on_every_case(agreement):
    expected = {
        "passing": True, "one_out": False, "nan": False, "inf_ref_finite_out": False, "same_inf": True,
        "small_zeros": False, "huge": True, "half": True, "bf16_out": False,
    }  # fmt: skip
    assert {name: row["torch"] for name, row in agreement.items()} == expected
    assert {name: row["fused"] for name, row in agreement.items()} == expected
    for name, row in agreement.items():
        assert row["message"] == row["torch_message"], name


def test_the_one_pass_counts_and_norms_match_the_torch_ones(agreement):
    for name, row in agreement.items():
        assert row["same_count"], name
        if all(map(math.isfinite, row["torch_maxima"])):
            assert row["maxima"] == pytest.approx(row["torch_maxima"], rel=1e-6), name
    assert agreement["passing"]["n_out"] == 0
    assert agreement["one_out"]["n_out"] == 1
    assert agreement["nan"]["n_out"] == 1
    assert agreement["small_zeros"]["n_out"] == 0  # within atol everywhere: only the norm catches it
    for name in ("passing", "one_out", "small_zeros", "half"):
        assert agreement[name]["norm_rel"] < 1e-5, name
        assert agreement[name]["err_rel"] < 1e-4, name


def test_an_infinite_reference_element_is_never_matched_by_a_finite_one():
    """The fast path's bound ``atol + rtol*|e|`` is infinite where the reference is: the torch check must not
    count a finite candidate element there as within tolerance."""
    import torch

    from kzcore.builtins.outputs import compare
    from kzcore.types import EvalConfig

    e = torch.tensor([float("inf"), 1.0, 2.0])
    verdict = compare([e], [torch.tensor([5.0, 1.0, 2.0])], EvalConfig())
    assert not verdict.ok and "outside" in verdict.message
    assert compare([e], [e.clone()], EvalConfig()).ok


def test_a_launch_that_did_not_cover_the_output_is_not_a_verdict(monkeypatch):
    import torch

    monkeypatch.setattr(check, "_launch", lambda e, a, atol, rtol: torch.full((3, check.COLUMNS), float("nan")))
    assert check.summary(torch.zeros(10), torch.zeros(10), 1e-2, 1e-2) is None
    # a launch over part of the output (one block's count short)
    partial = torch.zeros(3, check.COLUMNS)
    partial[:, 0] = torch.tensor([4096.0, 4096.0, 0.0])
    monkeypatch.setattr(check, "_launch", lambda e, a, atol, rtol: partial)
    assert check.summary(torch.zeros(8193), torch.zeros(8193), 1e-2, 1e-2) is None


def test_triton_hooks_and_knobs_a_candidate_set_are_off_for_the_launch_and_back_after():
    from triton import knobs

    def spy(*args, **kwargs):
        raise AssertionError("a candidate's hook ran inside the check")

    knobs.runtime.launch_enter_hook.add(spy)
    saved_debug, saved_cache_hook = knobs.runtime.debug, knobs.runtime.jit_cache_hook
    knobs.runtime.debug, knobs.runtime.jit_cache_hook = True, spy
    try:
        with check._plain_triton():
            assert knobs.runtime.launch_enter_hook.calls == []
            assert knobs.runtime.jit_cache_hook is None and knobs.runtime.debug is False
            assert knobs.compilation.instrumentation_mode == ""
        assert spy in knobs.runtime.launch_enter_hook.calls
        assert knobs.runtime.debug is True and knobs.runtime.jit_cache_hook is spy
    finally:
        knobs.runtime.launch_enter_hook.remove(spy)
        knobs.runtime.debug, knobs.runtime.jit_cache_hook = saved_debug, saved_cache_hook


def test_without_a_compiled_kernel_the_core_check_answers():
    """A CPU worker, or any process that did not warm the kernel: the plugin's hook declines, and summarise
    declines a tensor whose dtype or device was not warmed."""
    import torch

    import kz_triton
    from kzcore.types import EvalConfig

    assert not check.ready()
    assert kz_triton.kz_check_outputs([torch.zeros(3)], [torch.zeros(3)], EvalConfig()) is None
    assert check.summarise(torch.zeros(3), torch.zeros(3), 1e-2, 1e-2) is None
