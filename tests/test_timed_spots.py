"""Every timed pair is spot-checked (kzcore/evaluate/spots.py): each side's outputs copied at drawn positions
right after its call and compared by the checker's elementwise rule, so a timed call that skips or reuses its
work is caught in the pair it happens in, not only when a drawn check lands on it."""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kzcore import hookimpl
from kzcore.builtins.outputs import compare
from kzcore.errors import TimedCheckFailed
from kzcore.eval_config import Tolerance
from kzcore.evaluate.spots import SpotCheck, outside
from kzcore.evaluate.tensors import snapshot
from kzcore.evaluate.timing import spot_check
from kzcore.plugins import new_plugin_manager
from kzcore.timed import TimedRounds
from kzcore.types import EvalConfig, OutputCheck
from tests.test_timed_integrity import drive

CONFIG = EvalConfig(device="cpu")
TOL = Tolerance(atol=1e-2, rtol=1e-2)


def draw(seed: int) -> list:
    return [torch.randn(64, 48, generator=torch.Generator().manual_seed(seed))]


def full_check(expected, actual, where):
    verdict = compare(expected, actual, CONFIG)
    if not verdict.ok:
        raise TimedCheckFailed(f"{where}: {verdict.message}")


def rounds_with(spots: SpotCheck | None, share: float = 0.0) -> TimedRounds:
    x = draw(0)[0]
    return TimedRounds(
        draw, [[x.clone()]], [[x.clone()]], full_check, snapshot, share, rng=random.Random(0), spots=spots
    )


def skipping(rounds: TimedRounds, skip_pairs: set[int], stale_share: float = 1.0):
    """A ReLU that, in the pairs named, returns its previous output (``stale_share`` of it; the rest computed)."""
    memory: dict = {}

    def candidate():
        fresh = torch.relu(rounds.cand_inputs[0])
        if rounds.pairs in skip_pairs and "out" in memory:
            keep = torch.rand(fresh.shape, generator=torch.Generator().manual_seed(rounds.pairs)) < stale_share
            fresh = torch.where(keep, memory["out"], fresh)
        memory["out"] = fresh
        return fresh

    return candidate


def test_a_skip_in_one_undrawn_pair_escapes_the_drawn_checks_but_not_the_spots():
    plain = rounds_with(spots=None)
    drive(plain, lambda: torch.relu(plain.ref_inputs[0]), skipping(plain, {3}), 8)  # only the last is drawn
    assert plain.checked == 1  # the gap: pair 3 was never looked at
    spotted = rounds_with(SpotCheck(CONFIG.tolerance_for))
    with pytest.raises(TimedCheckFailed, match=r"^timed pair 3: the candidate's output differs .* at \d+ of"):
        drive(spotted, lambda: torch.relu(spotted.ref_inputs[0]), skipping(spotted, {3}), 8)


@pytest.mark.parametrize("stale_share", [0.05, 0.5])
def test_a_partly_stale_output_is_caught(stale_share):
    rounds = rounds_with(SpotCheck(CONFIG.tolerance_for, count=256, seed=0))
    with pytest.raises(TimedCheckFailed, match=r"^timed pair 2:"):
        drive(rounds, lambda: torch.relu(rounds.ref_inputs[0]), skipping(rounds, {2, 4}, stale_share), 6)


def test_honest_outputs_within_tolerance_pass_every_pair():
    rounds = rounds_with(SpotCheck(CONFIG.tolerance_for, count=128))

    def candidate():  # ReLU with error just inside atol + rtol * |e|, in a transposed (non-contiguous) layout
        out = torch.relu(rounds.cand_inputs[0])
        return (out + 0.9 * (1e-2 + 1e-2 * out.abs())).t().contiguous().t()

    drive(rounds, lambda: torch.relu(rounds.ref_inputs[0]), candidate, 12)
    assert rounds.spots.compared == 12


def test_a_stale_output_in_a_strided_layout_is_caught():
    rounds = rounds_with(SpotCheck(CONFIG.tolerance_for, count=64))
    stale = skipping(rounds, {5})

    def candidate():
        return stale().t().contiguous().t()  # same values, column-major storage

    with pytest.raises(TimedCheckFailed, match=r"^timed pair 5:"):
        drive(rounds, lambda: torch.relu(rounds.ref_inputs[0]), candidate, 8)


def test_an_output_of_another_shape_in_an_undrawn_pair_is_refused_at_its_end():
    rounds = rounds_with(SpotCheck(CONFIG.tolerance_for))

    def candidate():
        out = torch.relu(rounds.cand_inputs[0])
        return out[:1] if rounds.pairs == 2 else out  # little work while timed

    with pytest.raises(TimedCheckFailed, match=r"^timed pair 2: the candidate's outputs \(\[1, 48\] float32 on cpu\)"):
        drive(rounds, lambda: torch.relu(rounds.ref_inputs[0]), candidate, 6)


def test_an_output_in_memory_it_does_not_own_is_refused_in_any_pair():
    rounds = rounds_with(SpotCheck(CONFIG.tolerance_for))

    def candidate():
        out = torch.relu(rounds.cand_inputs[0])
        return torch.from_numpy(out.numpy().copy()) if rounds.pairs == 2 else out

    with pytest.raises(TimedCheckFailed, match="a timed call: the output does not own its memory"):
        drive(rounds, lambda: torch.relu(rounds.ref_inputs[0]), candidate, 6)


def test_positions_differ_from_pair_to_pair_and_timing_to_timing():
    spots = SpotCheck(CONFIG.tolerance_for, count=16)
    t = torch.zeros(10_000)
    seen = []
    for _ in range(3):
        spots.begin()
        spots.take("reference", [t])
        seen.append(tuple(spots._positions[0].tolist()))
    assert len(set(seen)) == 3
    other = SpotCheck(CONFIG.tolerance_for, count=16)
    other.take("reference", [t])
    assert tuple(other._positions[0].tolist()) not in seen  # seeded by the operating system, per timing


def test_small_outputs_are_compared_whole():
    spots = SpotCheck(CONFIG.tolerance_for, count=64)
    e, a = torch.zeros(5), torch.zeros(5)
    a[4] = 1.0
    spots.take("reference", [e])
    spots.take("candidate", [a])
    spots.end("timed pair 1")
    assert spots.verify().startswith(
        "timed pair 1: the candidate's output differs from the reference's on the same inputs at 1 of"
    )


def test_the_rule_is_the_checkers_for_nan_infinities_and_integers():
    inf, nan = float("inf"), float("nan")
    e = torch.tensor([1.0, inf, -inf, nan, 2.0, 1.0, inf])
    a = torch.tensor([1.005, inf, -inf, 7.0, nan, inf, 5.0])
    assert outside(e, a, TOL).item() == 3  # NaN for 2.0, inf for 1.0, 5.0 for inf
    assert outside(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]), TOL).item() == 1
    half = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert outside(half, half * 1.01, CONFIG.tolerance_for("torch.bfloat16")).item() == 0


finite = st.floats(-1e4, 1e4, width=32)
special = st.sampled_from([float("nan"), float("inf"), float("-inf")])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.one_of(finite, special), st.one_of(finite, special)), min_size=1, max_size=12),
    st.sampled_from(["float32", "float16", "bfloat16", "float64"]),
)
def test_never_stricter_than_the_full_check(pairs, dtype):
    """Compared whole (few elements), the spots fail exactly the outputs the full check's elementwise rule
    fails: never an output the checker passes."""
    e = torch.tensor(np.array([p[0] for p in pairs], dtype=np.float64)).to(getattr(torch, dtype))
    a = torch.tensor(np.array([p[1] for p in pairs], dtype=np.float64)).to(getattr(torch, dtype))
    spots = outside(e, a, CONFIG.tolerance_for(str(e.dtype))).item()
    full = compare([e], [a], CONFIG)
    assert (spots == 0) == full.ok, (e, a, spots, full.message)


class LooseCheck:
    @hookimpl(tryfirst=True)
    def kz_check_outputs(self, expected, actual, config):
        return OutputCheck(True, "")


def test_spots_run_only_where_every_output_checker_is_elementwise():
    pm = new_plugin_manager()
    notes: list[str] = []
    state = types.SimpleNamespace(config=EvalConfig(), pm=pm, note_once=notes.append)
    assert isinstance(spot_check(state), SpotCheck) and not notes
    assert spot_check(types.SimpleNamespace(config=EvalConfig(timed_spots=0), pm=pm, note_once=notes.append)) is None
    pm.register(LooseCheck(), name="loose")
    assert spot_check(state) is None
    assert notes == [
        "only the drawn timed pairs checked: output checker(s) loose not marked elementwise (kzcore/evaluate/spots.py)"
    ]


def test_kz_triton_check_is_marked_elementwise():
    import kz_triton

    assert kz_triton.kz_check_outputs.elementwise is True


def test_the_gpu_case_of_a_partial_timed_skip_gets_past_the_static_check():
    """tests/adversarial/timed_skip_some.py (run against the real timer in tests/test_gpu_timed.py) is left to
    the runtime defence: the static check finds nothing in it."""
    from pathlib import Path

    from kz_triton.static import check_source

    source = (Path(__file__).parent / "adversarial" / "timed_skip_some.py").read_text()
    assert check_source(source) == []


def test_errors_per_placement_estimate_the_relative_l2_error():
    """What the precision policy reads while timed: per placement, the candidate's relative L2 error over the
    values compared (here about 1e-3 on placement 0, exact on placement 1), and how many values it rests on."""
    spots = SpotCheck(CONFIG.tolerance_for, count=512, seed=0)
    g = torch.Generator().manual_seed(0)
    for pair in range(6):
        e = torch.randn(100_000, generator=g)
        a = e * (1 + 1e-3 * torch.randn(100_000, generator=g)) if pair % 2 == 0 else e.clone()
        spots.begin()
        spots.take("reference", [e])
        spots.take("candidate", [a])
        spots.end(f"timed pair {pair + 1}", group=pair % 2)
    assert spots.verify() == ""
    (err0, n0), (err1, n1) = spots.errors[0], spots.errors[1]
    assert 0.8e-3 < err0 < 1.25e-3 and err1 == 0.0 and n0 == n1 == 3 * 512


def test_a_partial_refill_redraws_one_random_span_of_each_large_input_the_same_on_both_sides():
    from kzcore.evaluate.tensors import REFILL_MIN_NUMEL, refill_plan

    big, small = torch.zeros(REFILL_MIN_NUMEL * 2), torch.zeros(100)
    assert refill_plan([big, small], 1.0, random.Random(0)) is None
    plans = [refill_plan([big, small, 3], 0.125, random.Random(seed)) for seed in range(5)]
    assert all(set(p) == {0} and p[0][1] - p[0][0] == REFILL_MIN_NUMEL // 4 for p in plans)
    assert len({p[0] for p in plans}) == 5  # where the span lies is drawn

    n = REFILL_MIN_NUMEL * 2

    def draw(seed: int) -> list:
        return [torch.randn(n, generator=torch.Generator().manual_seed(seed)), torch.randn(10)]

    first = draw(0)
    rounds = TimedRounds(
        draw, [[first[0].clone(), first[1].clone()]], [[first[0].clone(), first[1].clone()]], full_check, snapshot,
        0.0, rng=random.Random(1), spots=SpotCheck(CONFIG.tolerance_for), refill_share=0.125,
    )  # fmt: skip
    before = rounds.ref_inputs[0].clone()
    rounds.begin()
    changed = (rounds.ref_inputs[0] != before).sum().item()
    assert 0.12 * n < changed <= 0.125 * n + 1  # one eighth redrawn (all but ties)
    assert torch.equal(rounds.ref_inputs[0], rounds.cand_inputs[0]) and torch.equal(
        *[r[1] for r in (rounds.ref_inputs, rounds.cand_inputs)]
    )


def test_a_cache_that_hits_on_the_unchanged_rest_of_a_partial_refill_is_caught_by_the_spots():
    from kzcore.evaluate.tensors import REFILL_MIN_NUMEL

    n = REFILL_MIN_NUMEL * 2

    def draw(seed: int) -> list:
        return [torch.randn(n, generator=torch.Generator().manual_seed(seed))]

    x = draw(0)[0]
    rounds = TimedRounds(
        draw, [[x.clone()]], [[x.clone()]], full_check, snapshot, 0.0, rng=random.Random(2),
        spots=SpotCheck(CONFIG.tolerance_for, seed=0), refill_share=0.125,
    )  # fmt: skip
    cache: dict = {}

    def candidate():  # keyed on a few sampled values, as a cache that beats fresh draws would be
        key = tuple(rounds.cand_inputs[0][:8].tolist())
        if key not in cache:
            cache[key] = torch.relu(rounds.cand_inputs[0])
        return cache[key]

    for _ in range(5):  # no pair drawn for the full check: only the spots look
        rounds.begin(check=False)
        rounds.took("reference", torch.relu(rounds.ref_inputs[0]))
        rounds.took("candidate", candidate())
        rounds.end()
    assert len(cache) < 5  # it did hit: the unchanged rest kept its key
    with pytest.raises(TimedCheckFailed, match=r"^timed pair \d+: the candidate's output differs .* at \d+ of"):
        rounds.finish()


def test_a_partial_refill_needs_the_spot_checks():
    with pytest.raises(ValueError, match="below 1 only with spot checks"):
        TimedRounds(draw, [[]], [[]], full_check, snapshot, 0.0, refill_share=0.5)
