"""What is timed is what was checked: the timed rounds (kzcore.timed: new inputs every pair, checked pairs,
outputs copied before the reference runs), the op guard inside launches, foreign outputs and the precision
policy, unit by unit and end to end through the real evaluator (spawned workers, Triton interpreter on CPU).
The GPU forms (timed calls under CUDA events, a borrowed view of freed device memory, side streams, the
GPU-work profile) are in tests/test_gpu.py."""

from __future__ import annotations

import random
import weakref
from pathlib import Path

import attrs
import pytest
import torch

from kz_triton.static import check_source
from kzcore.errors import TimedCheckFailed
from kzcore.evaluate import precision
from kzcore.evaluate.tensors import NotOwned, snapshot
from kzcore.executors.local import LocalPool
from kzcore.plugins import new_plugin_manager
from kzcore.problems import load_problems
from kzcore.timed import TimedRounds
from kzcore.types import Candidate, EvalConfig, EvalJob, Problem, Status

HERE = Path(__file__).resolve().parent
CONFIG = EvalConfig(device="cpu", trials=2, timeout_s=120)


def relu_draw(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(64, 32, generator=g)]


def strict_check(expected, actual, where):
    if not torch.allclose(expected[0], actual[0]):
        raise TimedCheckFailed(f"{where}: differs")


def rounds_for(share: float, seed: int = 0, draw=relu_draw, check=strict_check):
    inputs = relu_draw(0)
    ref_inputs, cand_inputs = [inputs[0].clone()], [inputs[0].clone()]
    return TimedRounds(draw, [ref_inputs], [cand_inputs], check, snapshot, share, rng=random.Random(seed))


def drive(rounds: TimedRounds, reference, candidate, pairs: int) -> None:
    """A timer's loop over the rounds, the candidate second in even pairs and first in odd ones; then the core's
    ``finish`` (the spot checks, where the rounds have them)."""
    for i in range(pairs):
        rounds.begin(last=i == pairs - 1)
        order = [("reference", reference), ("candidate", candidate)]
        for side, fn in order if i % 2 == 0 else order[::-1]:
            rounds.took(side, fn())
        rounds.end()
    rounds.finish()


def test_every_pair_gets_new_contents_the_same_on_both_sides():
    rounds = rounds_for(share=0.0)
    seen = []

    def reference():
        seen.append(rounds.ref_inputs[0].clone())
        return torch.relu(rounds.ref_inputs[0])

    def candidate():
        assert torch.equal(rounds.cand_inputs[0], rounds.ref_inputs[0])
        return torch.relu(rounds.cand_inputs[0])

    before = rounds.ref_inputs[0].data_ptr()
    drive(rounds, reference, candidate, 20)
    assert rounds.ref_inputs[0].data_ptr() == before  # refilled in place: the timed tensors stay put
    distinct = {tuple(x.flatten()[:4].tolist()) for x in seen}
    assert len(distinct) == 20


def test_a_cache_keyed_on_sampled_input_values_never_hits():
    """A cache keyed on a few sampled values (not pointers) hits on every repetition of fixed contents; on new
    contents every pair it never does."""

    def caching_candidate(rounds):
        cache, hits = {}, [0]

        def candidate():
            x = rounds.cand_inputs[0]
            key = tuple(x.flatten()[::97][:8].tolist())
            if key in cache:
                hits[0] += 1
                return cache[key]
            cache[key] = torch.relu(x)
            return cache[key]

        return candidate, hits

    fresh = rounds_for(share=1.0)
    candidate, hits = caching_candidate(fresh)
    drive(fresh, lambda: torch.relu(fresh.ref_inputs[0]), candidate, 30)
    assert hits[0] == 0 and fresh.checked == 30
    fixed = TimedRounds(
        None, [fresh.ref_inputs], [fresh.cand_inputs], strict_check, snapshot, 1.0, rng=random.Random(0)
    )  # fmt: skip
    candidate, hits = caching_candidate(fixed)
    drive(fixed, lambda: torch.relu(fixed.ref_inputs[0]), candidate, 30)
    assert hits[0] == 29  # what the defence takes away


def test_a_stale_output_in_a_timed_pair_is_caught_at_the_last_pair_at_least():
    rounds = rounds_for(share=0.0)
    last = {}

    def candidate():
        if "out" in last:
            return last["out"]  # skips the work once it has an output
        last["out"] = torch.relu(rounds.cand_inputs[0])
        return last["out"]

    with pytest.raises(TimedCheckFailed, match=r"timed pair 5, the last: differs"):
        drive(rounds, lambda: torch.relu(rounds.ref_inputs[0]), candidate, 5)


def test_every_candidate_call_is_followed_by_the_after_candidate_check_which_can_stop_the_timing():
    """The evaluator's problem watch runs after every timed call of the candidate, before the pair's other call:
    once per pair, whichever side goes first; what it raises ends the timing."""
    rounds = rounds_for(share=0.0)
    events = []
    rounds.after_candidate = lambda: events.append("watch")

    def reference():
        events.append("reference")
        return torch.relu(rounds.ref_inputs[0])

    def candidate():
        events.append("candidate")
        return torch.relu(rounds.cand_inputs[0])

    drive(rounds, reference, candidate, 4)
    assert events == ["reference", "candidate", "watch", "candidate", "watch", "reference"] * 2

    def tampered():
        raise TimedCheckFailed("right after a timed call of the candidate: a hook")

    rounds = rounds_for(share=0.0)
    rounds.after_candidate = tampered
    with pytest.raises(TimedCheckFailed, match="a hook"):
        drive(rounds, reference, candidate, 4)


class FakeAllocatorStats:
    """The figures of torch.cuda.memory_stats that memory.ReleaseWatch reads, set by the test's calls."""

    def __init__(self):
        self.reserved, self.retries, self.frees = 64 << 20, 0, 0

    def __call__(self):
        return {
            "reserved_bytes.all.current": self.reserved,
            "num_alloc_retries": self.retries,
            "num_device_free": self.frees,
        }


def test_a_candidate_call_that_gives_cached_memory_back_is_caught_on_a_checked_pair():
    """On a GPU the allocator's statistics are read around the candidate's call of a checked pair, whichever side
    goes first: memory given back there (torch.cuda.empty_cache) would make the reference's next allocations
    cudaMalloc inside its timed call. The reference growing the cache, or an out-of-memory retry, is not it."""
    from kzcore.evaluate.memory import ReleaseWatch

    stats = FakeAllocatorStats()

    def reference():
        stats.reserved += 2 << 20  # the reference's outputs: the cache only grows
        return torch.relu(rounds.ref_inputs[0])

    def honest():
        return torch.relu(rounds.cand_inputs[0])

    rounds = rounds_for(share=1.0)
    rounds.allocator = ReleaseWatch(stats)
    drive(rounds, reference, honest, 4)

    def retried():
        stats.reserved -= 8 << 20  # freed by the allocator itself to retry a failed allocation
        stats.retries += 1
        return honest()

    rounds = rounds_for(share=1.0)
    rounds.allocator = ReleaseWatch(stats)
    drive(rounds, reference, retried, 4)

    def releasing():
        stats.reserved -= 32 << 20
        return honest()

    def swapping():  # a segment freed and a larger one taken in the same call: the reserved bytes grow
        stats.reserved += 16 << 20
        stats.frees += 1
        return honest()

    stats.frees = 0
    rounds = rounds_for(share=1.0)
    rounds.allocator = ReleaseWatch(stats)
    with pytest.raises(
        TimedCheckFailed, match=r"timed pair 1: .*\(1 cudaFree call\(s\), reserved memory 50.0 to 66.0 MiB;"
    ):
        drive(rounds, reference, swapping, 2)

    for pairs in (1, 2):  # the reference first (pair 1), the candidate first (pair 2)
        stats.reserved = 64 << 20
        rounds = rounds_for(share=0.0)
        rounds.allocator = ReleaseWatch(stats)
        with pytest.raises(
            TimedCheckFailed, match=f"timed pair {pairs}: the candidate's call gave the caching allocator's memory back"
        ):
            drive(rounds, reference, releasing, pairs)


def test_checked_pairs_are_drawn_at_random_and_the_last_always():
    counts = []
    for seed in range(5):
        rounds = rounds_for(share=0.25, seed=seed)
        drive(rounds, lambda r=rounds: torch.relu(r.ref_inputs[0]), lambda r=rounds: torch.relu(r.cand_inputs[0]), 200)
        counts.append(rounds.checked)
    assert all(25 <= c <= 80 for c in counts), counts
    assert len(set(counts)) > 1  # not a fixed schedule
    rounds = rounds_for(share=0.0)
    drive(rounds, lambda: torch.relu(rounds.ref_inputs[0]), lambda: torch.relu(rounds.cand_inputs[0]), 10)
    assert rounds.checked == 1 and rounds.last_checked
    # the default randomness is the operating system's: nothing seeded by the candidate predicts it
    assert isinstance(TimedRounds(None, [[]], [[]], strict_check, snapshot, 0.1).rng, random.SystemRandom)


def test_the_candidates_output_is_copied_before_the_reference_runs():
    """A candidate that returns a buffer without writing it, which the reference then fills with the answer
    (what a borrowed view of freed memory amounts to): the check sees the buffer as the candidate left it."""
    rounds = rounds_for(share=1.0)
    shared = torch.full((64, 32), float("nan"))

    def reference():
        shared.copy_(torch.relu(rounds.ref_inputs[0]))
        return torch.relu(rounds.ref_inputs[0])

    with pytest.raises(TimedCheckFailed):
        drive(rounds, reference, lambda: shared, 2)  # the second pair runs the candidate first


def test_nothing_a_call_can_see_tells_a_checked_pair_from_another():
    """At the candidate's call, the reference output of its pair is alive in every pair, checked or not (the
    rounds keep both sides' outputs until the pair ends), and its own previous output is gone."""
    rounds = rounds_for(share=0.5, seed=3)
    ref_out: list = []
    own_out: list = []
    alive = []

    def reference():
        out = torch.relu(rounds.ref_inputs[0])
        ref_out[:] = [weakref.ref(out)]
        return out

    def candidate():
        out = torch.relu(rounds.cand_inputs[0])
        alive.append((ref_out[0]() is not None, own_out[0]() is None if own_out else True))
        own_out[:] = [weakref.ref(out)]
        return out

    for i in range(40):  # reference first in every pair: its output exists at the candidate's call
        rounds.begin(last=i == 39)
        rounds.took("reference", reference())
        rounds.took("candidate", candidate())
        rounds.end()
    assert 1 < rounds.checked < 40
    assert alive == [(True, True)] * 40


def test_snapshot_keeps_the_layout_and_refuses_memory_it_does_not_own():
    import numpy as np

    a = torch.arange(6.0).view(2, 3)
    expanded = torch.ones(3).expand(4, 3)
    copies = snapshot([a, expanded, a.t()])
    assert [c.stride() for c in copies] == [a.stride(), (0, 1), (1, 3)]
    a.zero_()
    assert copies[0].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    with pytest.raises(NotOwned, match="does not own its memory"):
        snapshot([torch.utils.dlpack.from_dlpack(np.ones(3, dtype=np.float32))])
    # a view whose values are the negation of what its memory holds: a copy of the storage would drop the bit
    negated = torch.zeros(4, dtype=torch.complex64).conj().imag
    assert negated.is_neg()
    with pytest.raises(NotOwned, match="lazy negation or conjugation bit"):
        snapshot([negated])


def test_precision_policy_on_an_fp32_linear():
    """bf16 operands on an fp32 Linear pass the 1e-2 tolerance but not the policy; TF32 and fp32 pass."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(1024, 512)
    x = torch.rand(64, 1024)
    expected = [linear(x)]
    tf32, bf16 = precision.bars(lambda m, args: [m(*args)], linear, [x], expected)
    as_bf16 = torch.nn.functional.linear(x.bfloat16(), linear.weight.bfloat16(), linear.bias.bfloat16()).float()
    assert torch.allclose(as_bf16, expected[0], atol=1e-2, rtol=1e-2)  # the tolerance alone lets it through
    as_tf32 = torch.nn.functional.linear(precision.round_tf32(x), precision.round_tf32(linear.weight), linear.bias)
    exact = (x.double() @ linear.weight.double().t() + linear.bias.double()).float()
    assert "computes below the problem's precision" in precision.verdict(
        precision.rel_l2([as_bf16], expected), tf32, bf16
    )
    assert precision.verdict(precision.rel_l2([as_tf32], expected), tf32, bf16) == ""
    assert precision.verdict(precision.rel_l2([exact], expected), tf32, bf16) == ""
    assert precision.fp32_problem(expected, [x]) and not precision.fp32_problem([expected[0].half()], [x])


# ------------------------------------------------------------------------------------------------------
# end to end: the real evaluator (spawned workers), Triton under the interpreter, "python" for precision
# ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def problems() -> dict[str, Problem]:
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    return {p.name: p for p in load_problems("builtin", pm=pm)}


@pytest.fixture(scope="module")
def triton_pool(own_workers):
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_triton"]) as pool:
        yield pool


def run_one(pool, problem: Problem, source: str, language: str = "triton", config: EvalConfig = CONFIG):
    cand = Candidate(problem=problem.name, language=language, level=problem.level, source=source)
    (result,) = pool.map([EvalJob(problem, cand, config)])
    return result


def adversarial(kind: str) -> str:
    source = (HERE / "adversarial" / f"{kind}.py").read_text()
    assert check_source(source) == []  # each gets past the static check: the runtime defence is under test
    return source


def test_work_skipped_only_while_timed_is_hack_suspected(triton_pool, problems):
    result = run_one(triton_pool, problems["1_ReLU"], adversarial("timed_skip_count"))
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.message.startswith("timed pair "), result.message
    assert "differs from the reference's on the same inputs, though its correctness trials passed" in result.message


def test_a_forward_that_reads_the_call_stack_is_refused_before_it_runs(triton_pool, problems):
    """The timer's frames on the stack told the timed calls from the trials; `traceback` (like `inspect`, pdb and
    `sys._getframe`) is refused, and the timed checks stand behind (`timed_skip_count` above)."""
    result = run_one(triton_pool, problems["1_ReLU"], (HERE / "adversarial" / "timed_skip_stack.py").read_text())
    assert result.status is Status.STATIC_CHECK_FAILED, result.message
    assert "importing `traceback` is not allowed in a kernel module" in result.message


def test_an_output_in_memory_it_does_not_own_is_hack_suspected(triton_pool, problems):
    result = run_one(triton_pool, problems["1_ReLU"], adversarial("foreign_output"))
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.message.startswith("trial 0: the output does not own its memory"), result.message


@pytest.mark.parametrize(
    "kind, problem, op",
    [("prerun_hook_softmax", "11_Softmax", "aten._softmax"), ("grid_softmax", "11_Softmax", "aten._softmax"),
     ("prerun_hook_matmul", "19_Matmul", "aten.mm")],
)  # fmt: skip
def test_torch_compute_in_a_launch_callback_is_caught_by_the_op_guard(triton_pool, problems, kind, problem, op):
    result = run_one(triton_pool, problems[problem], adversarial(kind))
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "forward ran PyTorch compute operators outside its kernels" in result.message and op in result.message


def test_an_honest_kernel_passes_its_checked_timed_pairs(triton_pool, problems):
    source = (HERE / "legit" / "fused_softmax.py").read_text()
    result = run_one(triton_pool, problems["11_Softmax"], source)
    assert result.status is Status.CORRECT, result.message
    assert result.timed_checks == 2  # both untimed CPU pairs are checked
    assert result.spot_checked == 2  # and spot-checked, the worker's checkers being elementwise
    assert result.rel_l2_err is not None and result.rel_l2_err < precision.FP32_CLASS


def test_a_partial_refill_runs_through_the_evaluator_and_needs_the_spots(triton_pool, problems):
    source = (HERE / "legit" / "fused_softmax.py").read_text()
    partial = EvalConfig(**{**_fields(CONFIG), "timed_refill": 0.125})
    result = run_one(triton_pool, problems["11_Softmax"], source, config=partial)
    assert result.status is Status.CORRECT and result.spot_checked == 2, result.message
    without = run_one(triton_pool, problems["11_Softmax"], source, config=attrs.evolve(partial, timed_spots=0))
    assert without.status is Status.CORRECT and without.spot_checked == 0, without.message
    assert "timed_refill=0.125 needs the spot checks: every timed input redrawn whole" in without.timing_note


LINEAR_BF16 = """
import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias
        return nn.functional.linear(x.{cast}(), w.{cast}(), b.{cast}()).float()
"""


def test_reduced_precision_on_an_fp32_problem_is_incorrect_unless_the_policy_is_off(problems, own_workers):
    problem = problems["23_Linear"]
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_pylang"]) as pool:
        bf16 = run_one(pool, problem, LINEAR_BF16.format(cast="bfloat16"), language="python")
        fp32 = run_one(pool, problem, LINEAR_BF16.format(cast="float"), language="python")
        off = run_one(
            pool,
            problem,
            LINEAR_BF16.format(cast="bfloat16"),
            "python",
            EvalConfig(**{**_fields(CONFIG), "precision": "any"}),
        )
    assert bf16.status is Status.INCORRECT and "computes below the problem's precision" in bf16.message, bf16.message
    assert bf16.tf32_l2_err is not None and bf16.rel_l2_err > bf16.tf32_l2_err
    assert fp32.status is Status.CORRECT, fp32.message
    assert off.status is Status.CORRECT, off.message


LINEAR_BF16_WHILE_TIMED = """
import traceback

import torch
from torch import nn

TIMER_FRAMES = {"untimed_pairs", "time_cuda", "timing_pass"}


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias
        if any(frame.name in TIMER_FRAMES for frame in traceback.extract_stack()):
            return nn.functional.linear(x.bfloat16(), w.bfloat16(), b.bfloat16()).float()
        return nn.functional.linear(x, w, b)
"""


LINEAR_TF32 = """
import torch
from torch import nn


def tf32(x):
    bits = (x.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF
    return bits.view(torch.float32)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return nn.functional.linear(tf32(x), tf32(self.linear.weight), self.linear.bias)
"""


def test_reduced_precision_only_while_timed_is_hack_suspected(problems, own_workers):
    """fp32 in its trials, bf16 operands in its timed calls: every timed value within the elementwise tolerance,
    so only the precision policy on the timed pairs' spot values tells (`timing.precision_while_timed`)."""
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_pylang"]) as pool:
        result = run_one(pool, problems["23_Linear"], LINEAR_BF16_WHILE_TIMED, language="python")
        off = run_one(
            pool, problems["23_Linear"], LINEAR_BF16_WHILE_TIMED, "python",
            EvalConfig(**{**_fields(CONFIG), "timed_spots": 0}),
        )  # fmt: skip
        honest = run_one(pool, problems["23_Linear"], LINEAR_TF32, language="python")
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.message.startswith("timed pairs: relative L2 error "), result.message
    assert "computes below the problem's precision while timed" in result.message
    assert result.rel_l2_err is not None and result.rel_l2_err <= precision.FP32_CLASS  # its trials were fp32
    assert off.status is Status.CORRECT, off.message  # what the spots' precision check takes away
    # TF32-class operands in trials and timing alike (error above fp32 class, within the bar): no false alarm
    assert honest.status is Status.CORRECT, honest.message
    assert honest.rel_l2_err > precision.FP32_CLASS and honest.tf32_l2_err is not None and honest.spot_checked == 2


def _fields(config: EvalConfig) -> dict:
    import attrs

    return attrs.asdict(config)
