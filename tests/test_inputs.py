"""Inputs the candidate cannot predict: per-trial sign/scale variation of floating inputs (seeded, never
integer tensors, with a per-problem opt-out), a second input shape, refilled input buffers, and the
re-verification of implausible speedups. Unit tests of kzcore.evaluate.variation; the pipeline in-process
with the toy "python" language (fast); and the adversarial Triton candidates in one worker pool whose
timing is faked (tests/fakes_inputs.py) so that every correct candidate looks 20x faster than the reference."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from kzcore.errors import ProblemFormatError
from kzcore.evaluate import variation
from kzcore.evaluate.pipeline import evaluate_job
from kzcore.executors.local import LocalPool
from kzcore.plugins import new_plugin_manager
from kzcore.problems import apply_size_profile, import_module_from_file, load_problems, load_solutions
from kzcore.types import Candidate, EvalConfig, EvalJob, EvalResult, Problem, Status, from_json, to_json
from tests import fakes_inputs

ROOT = Path(__file__).resolve().parent.parent
ADVERSARIAL = ROOT / "tests" / "adversarial"
FAKES = "tests.fakes_inputs"
CPU = EvalConfig(device="cpu", trials=5, timeout_s=60)

RELU_OF_RAND = """import torch
from torch import nn

batch_size = 64
dim = 512


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(batch_size, dim)]  # non-negative: relu(x) == x for every input drawn here


def get_init_inputs():
    return []


KZ_SIZES = {"small": {"batch_size": 16, "dim": 256}}
"""

PY_IDENTITY = """import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clone()  # "relu" for non-negative inputs only
"""

PY_RELU = PY_IDENTITY.replace('x.clone()  # "relu" for non-negative inputs only', "torch.relu(x)")

PY_WARM_CACHE = """import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = {}

    def forward(self, x):
        key = (tuple(x.shape), x.data_ptr())
        count, out = self.seen.get(key, (0, None))
        if count < 8:  # from the 8th call on one buffer (a timing loop), skip the work
            out = torch.relu(x)
            self.seen[key] = (count + 1, out)
        return out
"""


# Right everywhere except inside the evaluator's re-verification (it reads its own call stack): the path
# a candidate that survives every timed check but not the re-check takes.
PY_WRONG_WHEN_REVERIFIED = """import inspect

import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        if any(frame.function == "reverify" for frame in inspect.stack()):
            return torch.zeros_like(x)
        return torch.relu(x)
"""


def adversarial(kind: str) -> str:
    return (ADVERSARIAL / f"{kind}.py").read_text()


def relu_of_rand(extra: str = "") -> Problem:
    return Problem(name="relu_of_rand", source=RELU_OF_RAND + extra, level=1)


def module(**names) -> types.SimpleNamespace:
    return types.SimpleNamespace(**names)


# ------------------------------------------------------------------------------------------------------
# the variation itself
# ------------------------------------------------------------------------------------------------------


def test_trials_after_the_first_change_sign_and_scale_deterministically():
    x = torch.randn(64, 32)
    scales = []
    for trial in range(5):
        changes = variation.plan("scale", seed=0, trial=trial, count=1, decades=2.0)
        assert changes == variation.plan("scale", seed=0, trial=trial, count=1, decades=2.0)  # seeded
        varied, applied = variation.vary([x], changes, seed=trial)
        if trial == 0:
            assert applied == {} and varied[0] is x  # the problem's own inputs, untouched
            continue
        (change,) = changes
        assert applied == {0: change} and change.shift == 0 and change.redraw == ""
        assert torch.equal(varied[0], x * change.scale)
        scales.append(change.scale)
    # odd trials negate; the magnitudes cover a large, a small and two middling strata of 10**[-2, 2]
    assert [s < 0 for s in scales] == [True, False, True, False]
    mags = [abs(s) for s in scales]
    assert mags[0] >= 10 and mags[1] <= 0.1 and 1 <= mags[2] <= 10 and 0.1 <= mags[3] <= 1
    other_seed = [variation.plan("scale", seed=1, trial=t, count=1, decades=2.0)[0].scale for t in range(1, 5)]
    assert other_seed != scales


def test_integer_bool_and_scalar_inputs_are_never_touched():
    logits, targets, mask = torch.randn(8, 5), torch.randint(0, 5, (8,)), torch.rand(8) > 0.5
    inputs = [logits, targets, mask, 3, 0.5]
    for mode in ("scale", "full"):
        for trial in range(1, 7):
            changes = variation.plan(mode, seed=0, trial=trial, count=len(inputs), decades=2.0)
            varied, applied = variation.vary(inputs, changes, seed=trial)
            assert set(applied) == {0}
            assert varied[1] is targets and varied[2] is mask and varied[3:] == [3, 0.5]
            assert not torch.equal(varied[0], logits)


def test_full_mode_also_shifts_and_redraws_with_the_same_mean_and_spread():
    x = 3.0 + 2.0 * torch.randn(400, 300)
    kinds = set()
    for trial in range(1, 7):
        changes = variation.plan("full", seed=0, trial=trial, count=1, decades=1.0)
        (change,) = changes
        (varied,), _ = variation.vary([x], changes, seed=trial)
        again, _ = variation.vary([x], changes, seed=trial)
        assert torch.equal(varied, again[0])  # redraws use their own seeded generator
        assert varied.shape == x.shape and varied.dtype == x.dtype
        scaled = x * change.scale
        if change.redraw:
            kinds.add(change.redraw)
            assert not torch.allclose(varied, scaled)
            assert float(varied.mean()) == pytest.approx(float(scaled.mean()), abs=0.05 * float(scaled.std()))
            assert float(varied.std()) == pytest.approx(float(scaled.std()), rel=0.05)
        elif change.shift:
            kinds.add("shift")
            assert torch.allclose(varied - scaled, torch.full_like(x, change.shift * float(scaled.std())), atol=1e-3)
    assert "shift" in kinds and kinds & set(variation.REDRAWS)


def test_a_problem_narrows_or_switches_off_the_variation():
    assert variation.effective_mode("scale", module()) == "scale"
    assert variation.effective_mode("full", module()) == "full"
    assert variation.effective_mode("none", module(KZ_INPUT_VARIATION="full")) == "none"
    assert variation.effective_mode("full", module(KZ_INPUT_VARIATION="scale")) == "scale"
    assert variation.effective_mode("scale", module(KZ_INPUT_VARIATION="none")) == "none"
    assert variation.effective_mode("scale", module(KZ_INPUT_VARIATION="positive")) == "positive"
    for trial in range(1, 9):  # "positive" (log, sqrt, ...) rescales but never flips the sign
        assert all(c.scale > 0 for c in variation.plan("positive", 0, trial, 3, 2.0))
    assert variation.plan("none", 0, 3, 2, 2.0) == [variation.Change()] * 2
    with pytest.raises(ProblemFormatError, match="KZ_INPUT_VARIATION"):
        variation.effective_mode("scale", module(KZ_INPUT_VARIATION="sometimes"))


def test_the_tolerance_grows_with_the_outputs_never_shrinks():
    config = EvalConfig(atol=1e-2)
    base = variation.magnitudes([torch.ones(4) * 2.0, torch.arange(3)])
    assert base == [2.0, 0.0]  # integer outputs carry no magnitude
    assert variation.varied_config(config, base, [200.0, 5.0]).atol == pytest.approx(1.0)
    assert variation.varied_config(config, base, [0.02, 5.0]) is config
    nan_inf = torch.tensor([1.0, float("nan"), float("inf"), 3.0])
    assert variation.magnitudes([nan_inf]) == [1.0]  # non-finite elements count as 0
    torch.manual_seed(0)
    y = torch.randn(100_003) * 5
    exact = float(y.double().abs().mean())
    assert variation.magnitudes([y])[0] == pytest.approx(exact, rel=1e-5)  # the one-pass fp32 sum
    assert variation.magnitudes([y.half()])[0] == pytest.approx(exact, rel=1e-3)  # fp16's sum is not its own
    huge = torch.full((4,), 3e38)  # the fp32 sum overflows: the fp64 mean answers
    assert variation.magnitudes([huge]) == [pytest.approx(3e38)]


def test_results_from_before_these_fields_still_load():
    old = {"problem": "1_ReLU", "level": 1, "language": "triton", "sample": 0, "status": "correct", "schema": 1}
    result = from_json(EvalResult, old)
    assert result.reverified is False and result.second_shape == ""
    assert from_json(EvalResult, to_json(result)) == result


# ------------------------------------------------------------------------------------------------------
# the pipeline in-process, "python" candidates (plain PyTorch, no interpreter)
# ------------------------------------------------------------------------------------------------------


def evaluate_here(pm, problem: Problem, source: str, tmp_path, config: EvalConfig = CPU) -> EvalResult:
    cand = Candidate(problem=problem.name, language="python", level=problem.level, source=source)
    result, poisoned = evaluate_job(EvalJob(problem, cand, config), pm, tmp_path, "cpu")
    assert not poisoned, (result.status, result.message)
    return result


def test_a_candidate_exploiting_the_input_distribution_is_caught(plugins, tmp_path):
    pm = plugins("kz_pylang")
    without = evaluate_here(pm, relu_of_rand(), PY_IDENTITY, tmp_path, EvalConfig(device="cpu", input_variation="none"))
    assert without.status is Status.CORRECT, without.message  # the problem's own inputs cannot tell

    result = evaluate_here(pm, relu_of_rand(), PY_IDENTITY, tmp_path)
    assert result.status is Status.INCORRECT
    assert result.message.startswith("trial 1 (input 0 x-"), result.message  # trial 1 negates
    assert result.max_abs_err > 1.0

    # the salt moves each trial's draw, not its verdict; without it (secret_inputs off) the evaluation is
    # seeded: the same verdict again, word for word
    assert evaluate_here(pm, relu_of_rand(), PY_IDENTITY, tmp_path).status is Status.INCORRECT
    fixed = EvalConfig(device="cpu", secret_inputs=False)
    once = evaluate_here(pm, relu_of_rand(), PY_IDENTITY, tmp_path, fixed)
    assert (
        once.input_salt == 0 and evaluate_here(pm, relu_of_rand(), PY_IDENTITY, tmp_path, fixed).message == once.message
    )
    # and the honest kernel passes every varied trial
    honest = evaluate_here(pm, relu_of_rand(), PY_RELU, tmp_path)
    assert honest.status is Status.CORRECT, honest.message


PY_ZERO_THE_REFERENCE_S_INPUTS = """import gc

import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        # what a kernel writing memory outside its arguments could do: find the reference's copy of the inputs
        # (equal to this call's) and zero it with this call's own; both sides then compute relu(0)
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj is not x and obj.shape == x.shape and torch.equal(obj, x):
                obj.zero_()
        x.zero_()
        return torch.zeros_like(x)
"""


def test_a_call_that_rewrites_the_reference_s_copy_of_the_inputs_is_hack_suspected(plugins, tmp_path):
    pm = plugins("kz_pylang")
    result = evaluate_here(pm, relu_of_rand(), PY_ZERO_THE_REFERENCE_S_INPUTS, tmp_path)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "changed the reference's own copy of input(s) [0]" in result.message


def test_the_input_watch_sees_one_element_of_a_small_input_and_most_of_a_large_one():
    from kzcore.evaluate.refwatch import INPUT_SAMPLE, InputWatch

    small, large, scalar = torch.randn(100), torch.randn(4 * INPUT_SAMPLE), 3
    watch = InputWatch([small, scalar, large])
    assert watch.changed() == []
    small[37] += 1.0  # every position of a small input is kept
    large[: 3 * INPUT_SAMPLE].zero_()
    assert watch.changed() == [0, 2]


def test_a_problem_can_opt_out_of_the_variation(plugins, tmp_path):
    pm = plugins("kz_pylang")
    opted_out = relu_of_rand('\nKZ_INPUT_VARIATION = "none"  # e.g. inputs must stay probabilities\n')
    assert evaluate_here(pm, opted_out, PY_IDENTITY, tmp_path).status is Status.CORRECT
    positive = relu_of_rand('\nKZ_INPUT_VARIATION = "positive"\n')
    assert evaluate_here(pm, positive, PY_IDENTITY, tmp_path).status is Status.CORRECT  # never negated


def test_an_implausible_speedup_that_survives_re_verification_is_marked(plugins, tmp_path):
    pm = plugins("kz_pylang", f"{FAKES}:IMPLAUSIBLE_TIMER")
    relu = next(p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU")
    result = evaluate_here(pm, relu, PY_RELU, tmp_path)
    assert result.status is Status.CORRECT, result.message
    assert result.speedup == pytest.approx(20.0) and result.reverified is True
    assert result.second_shape == "alt"
    assert "re-verified" in result.timing_note and result.stages["reverify"] > 0

    plain = evaluate_here(pm, relu, PY_RELU, tmp_path, EvalConfig(device="cpu", implausible_speedup=0))
    assert plain.status is Status.CORRECT and plain.reverified is False and "reverify" not in plain.stages
    below = evaluate_here(pm, relu, PY_RELU, tmp_path, EvalConfig(device="cpu", implausible_speedup=25))
    assert below.reverified is False


def test_a_cache_that_waits_for_the_timing_loop_is_caught_by_the_timed_check(plugins, tmp_path):
    pm = plugins("kz_pylang", f"{FAKES}:IMPLAUSIBLE_TIMER")
    relu = next(p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU")
    # the timed pair is checked and its inputs are a new draw: the cache returns the previous output
    for config in (EvalConfig(device="cpu"), EvalConfig(device="cpu", implausible_speedup=0)):
        result = evaluate_here(pm, relu, PY_WARM_CACHE, tmp_path, config)
        assert result.status is Status.HACK_SUSPECTED, result.message
        assert result.message.startswith("timed pair"), result.message
        assert result.reverified is False


def test_an_implausible_speedup_that_fails_re_verification_is_hack_suspected(plugins, tmp_path):
    pm = plugins("kz_pylang", f"{FAKES}:IMPLAUSIBLE_TIMER")
    relu = next(p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU")
    result = evaluate_here(pm, relu, PY_WRONG_WHEN_REVERIFIED, tmp_path)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "implausible_speedup=10 and re-verification failed: re-verification trial 0" in result.message
    assert result.reverified is False
    # without the re-check, the same candidate is filed as a correct 20x kernel
    trusting = evaluate_here(
        pm, relu, PY_WRONG_WHEN_REVERIFIED, tmp_path, EvalConfig(device="cpu", implausible_speedup=0)
    )
    assert trusting.status is Status.CORRECT and trusting.speedup == pytest.approx(20.0)


def test_re_verification_keeps_the_lower_of_two_timings(plugins, tmp_path):
    pm = plugins("kz_pylang", f"{FAKES}:FADING_TIMER")
    fakes_inputs.FADING_TIMER.measured = 0
    relu = next(p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU")
    result = evaluate_here(pm, relu, PY_RELU, tmp_path)
    assert result.status is Status.CORRECT and result.reverified is True
    assert result.speedup == pytest.approx(2.5) and result.cand_ms == pytest.approx(0.8)
    assert "then 2.5x" in result.timing_note


# ------------------------------------------------------------------------------------------------------
# the built-in suite's second shape
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("problem", load_problems("builtin"), ids=lambda p: p.key)
def test_builtin_problem_has_a_distinct_alt_shape_that_runs(problem):
    mod = import_module_from_file(Path(problem.path), f"kz_test_inputs_{problem.level}_{problem.name}")
    sizes = mod.KZ_SIZES
    assert set(sizes["alt"]) == set(sizes["small"]), "alt must set the same constants as small"
    assert all(sizes["alt"][k] != sizes["small"][k] for k in sizes["small"]), sizes
    # the alt sizes keep each full size's divisibility by 16, so Triton (which specialises integer arguments
    # on it) can reuse the kernels it compiled for the full size instead of compiling new ones
    full = {k: getattr(mod, k) for k in sizes["alt"]}
    assert not [k for k, v in sizes["alt"].items() if full[k] % 16 == 0 and v % 16], (full, sizes["alt"])
    assert apply_size_profile(mod, "alt") == "alt"
    with torch.device("cpu"), torch.no_grad():
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs())
        out = model(*mod.get_inputs())
    outputs = out if isinstance(out, (tuple, list)) else [out]
    assert all(torch.isfinite(y.double()).all() for y in outputs)


# ------------------------------------------------------------------------------------------------------
# adversarial Triton candidates, in a worker pool that times everything at a fake 20x
# ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def triton_pool():
    with LocalPool(workers=1, config=CPU, plugins=["kz_triton", f"{FAKES}:IMPLAUSIBLE_TIMER"]) as pool:
        yield pool


@pytest.fixture(scope="module")
def builtin():
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    problems = {p.name: p for p in load_problems("builtin:1", pm=pm)}
    solutions = {c.problem: c for c in load_solutions("builtin", list(problems.values()), "triton", pm=pm)}
    return problems, solutions


def run_triton(pool, problem: Problem, source: str, config: EvalConfig = CPU) -> EvalResult:
    cand = Candidate(problem=problem.name, language="triton", level=problem.level, source=source)
    (result,) = pool.map([EvalJob(problem, cand, config)])
    return result


def test_hard_coded_shape_fails_the_second_shape(triton_pool, builtin):
    problems, _ = builtin
    source = adversarial("hardcoded_shape")
    one_shape = run_triton(triton_pool, problems["1_ReLU"], source, EvalConfig(device="cpu", second_shape=""))
    assert one_shape.status is Status.CORRECT, one_shape.message  # five trials at the tested shape pass
    assert one_shape.second_shape == ""

    result = run_triton(triton_pool, problems["1_ReLU"], source)
    assert result.status is Status.INCORRECT, result.message
    assert result.message.startswith("second shape (KZ_SIZES['alt'], batch_size=32, dim=336): trial 5: output")
    assert result.stages["second_shape"] > 0


def test_builtin_solution_passes_variation_second_shape_and_re_verification(triton_pool, builtin):
    problems, solutions = builtin
    result = run_triton(triton_pool, problems["1_ReLU"], solutions["1_ReLU"].source)
    assert result.status is Status.CORRECT, result.message
    assert result.second_shape == "alt" and result.reverified is True


def test_triton_kernel_assuming_non_negative_inputs_is_incorrect(triton_pool):
    source = adversarial("input_distribution")
    unvaried = run_triton(triton_pool, relu_of_rand(), source, EvalConfig(device="cpu", input_variation="none"))
    assert unvaried.status is Status.CORRECT, unvaried.message
    result = run_triton(triton_pool, relu_of_rand(), source)
    assert result.status is Status.INCORRECT and result.message.startswith("trial 1 (input 0 x-"), result.message


def test_output_cached_by_input_pointer_is_incorrect(triton_pool, builtin):
    problems, _ = builtin
    result = run_triton(triton_pool, problems["1_ReLU"], adversarial("cached_output"))
    assert result.status is Status.INCORRECT, result.message
    assert result.message.startswith("trial 1 "), result.message  # the refilled buffer gave it away
    assert result.launches == 1  # it computed once, then served the cache


def test_cache_that_waits_for_the_timing_loop_is_hack_suspected(triton_pool, builtin):
    problems, _ = builtin
    result = run_triton(triton_pool, problems["1_ReLU"], adversarial("warm_cache"))
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.message.startswith("timed pair"), result.message  # its stale output on a new draw


# ------------------------------------------------------------------------------------------------------
# bench/timing.py, smoke mode (CPU: interpreter, small sizes, a wall-clock timer; ~10 s)
# ------------------------------------------------------------------------------------------------------


def test_timing_bench_smoke_run(tmp_path, own_workers):
    out = tmp_path / "timing.json"
    cmd = [sys.executable, "bench/timing.py", "--device", "cpu", "--self-ref-problems", "1_ReLU", "--passes", "1",
           "--forced", "1_ReLU", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "self-reference" in proc.stdout
    report = json.loads(out.read_text())
    assert report["bench"] == "timing" and report["smoke"] is True
    assert set(report["summary"]["ok"]) == {"repeat", "e2e", "self_reference", "implausible"}
    assert "per candidate   median" in proc.stdout  # the latency line, whatever the CPU's figure
    assert report["repeat"]["problems"]["1_ReLU"]["statuses"] == ["correct"]
    assert len(report["repeat"]["problems"]["1_ReLU"]["speedups"]) == 2
    forced = report["implausible"]["cases"]["forced_reverify_1_ReLU"]
    assert forced["status"] == "correct" and forced["reverified"] is True and forced["reverify_s"] > 0
    assert report["self_reference"]["problems"]["1_ReLU"]["ratios"][0] > 0


def test_the_trials_seeds_follow_a_secret_salt_and_only_seed_without_one():
    """`EvalConfig.secret_inputs`: each evaluation draws a salt once its candidate is built; every trial's seed
    and the input variation's draws then depend on it, in the low 32 bits the CPU generator keeps. Off, the
    seeds are seed*1000 + trial + 1, as they always were."""
    import attrs

    from kzcore.evaluate.trials import draw_salt, trial_seed

    config = EvalConfig()
    assert [trial_seed(config, i) for i in range(3)] == [1, 2, 3]
    assert draw_salt(attrs.evolve(config, secret_inputs=False)) == 0
    salts = {draw_salt(config) for _ in range(20)}
    assert 0 not in salts and len(salts) == 20
    a, b = sorted(salts)[:2]
    seeds = [trial_seed(config, 1, salt) for salt in (0, a, b)]
    assert len({s & 0xFFFFFFFF for s in seeds}) == 3 and all(0 <= s < 2**31 for s in seeds)
    draws = []
    for seed in seeds:
        torch.manual_seed(seed)
        draws.append(torch.randn(4))
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])
    plans = [variation.plan("scale", 0, 1, 1, 2.0, salt)[0].scale for salt in (0, a, b)]
    assert len(set(plans)) == 3 and all(p < 0 for p in plans)  # trial 1 still negates; its magnitude moves
