"""Timing on several placements of the inputs (kzcore/evaluate/placement.py): the placements hold the
same values elsewhere, the timing stage calls the timer once per placement with its share of the repetitions,
and keeps the mean of the per-placement medians."""

from __future__ import annotations

import attrs
import pytest
import torch

from kzcore import hookimpl
from kzcore.evaluate.placement import MIB, Placements, per_placement, placement_count, placements_for
from kzcore.evaluate.stage import EvaluationState
from kzcore.evaluate.timing import combine, timing_pass
from kzcore.plugins import new_plugin_manager
from kzcore.types import Candidate, EvalConfig, EvalJob, Problem, Timing
from tests.fakes_inputs import pairs_through

SHIFT_MIB = 1 / 64  # 16 KiB: a multiple of every element size, small enough for a CPU test


def inputs():
    torch.manual_seed(0)
    return [torch.randn(64, 32), torch.randn(32, 48).t(), 3, torch.arange(10)[2:]]


@pytest.mark.parametrize("shift_mib", [0.0, SHIFT_MIB])
def test_every_placement_holds_the_same_values_elsewhere(shift_mib):
    original = inputs()
    seen = []
    for placed in Placements(original, 4, shift_mib):
        assert torch.equal(placed[0], original[0]) and torch.equal(placed[1], original[1])
        assert placed[1].stride() == original[1].stride()  # a transposed input keeps its layout
        assert placed[2] == 3
        assert placed[3] is original[3] or shift_mib == 0  # a slice is never moved into a view
        seen.append(placed[0].data_ptr())
    assert len(seen) == 4 and len(set(seen)) == 4
    if shift_mib:  # views one shift apart in one buffer
        assert [b - a for a, b in zip(seen[1:], seen[2:])] == [int(SHIFT_MIB * MIB)] * 2


def test_a_view_placement_is_written_just_before_it_is_yielded():
    """The views overlap, so each is filled when its turn comes: its values are the inputs' at that moment."""
    original = inputs()
    placements = iter(Placements(original, 3, SHIFT_MIB))
    next(placements)
    first = next(placements)
    assert torch.equal(first[0], original[0])
    second = next(placements)
    assert torch.equal(second[0], original[0])


def test_one_sides_copies_are_made_together_before_the_next_sides(monkeypatch):
    """Consecutive allocations take consecutive device memory: one side's copies made in one run cover a span
    of it evenly, where copies made turn about with the other side's fall on every other block."""
    from kzcore.evaluate import tensors

    made = []
    clone = tensors.clone_inputs

    def recording_clone(values):
        made.append(values[0].shape)
        return clone(values)

    monkeypatch.setattr(tensors, "clone_inputs", recording_clone)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (139 << 30, 141 << 30))
    ref, cand = [torch.randn(4, 4)], [torch.randn(2, 2)]
    ref_placed, cand_placed = placements_for(3, 0.0, "cuda", ref, cand)
    assert made == [(4, 4)] * 3 + [(2, 2)] * 3  # all made before any is timed, one side after the other
    pairs = list(zip(ref_placed, cand_placed))
    assert len(made) == 6 and len(pairs) == 3
    assert all(r[0] is not ref[0] and c[0] is not cand[0] for r, c in pairs)  # only copies are timed
    assert torch.equal(pairs[2][1][0], cand[0])


def test_one_placement_is_the_inputs_themselves():
    original = inputs()
    assert [p for p in Placements(original, 1)] == [original]


def test_separate_copies_are_capped_by_free_memory():
    gib = 1 << 30
    assert placement_count(8, 0.0, 4 * gib, free_bytes=139 * gib) == 8
    assert placement_count(8, 0.0, 4 * gib, free_bytes=40 * gib) == 2  # 25 % of 40 GiB / 4 GiB
    assert placement_count(8, 0.0, 4 * gib, free_bytes=24 * gib) == 1  # one copy: the inputs as they are
    assert placement_count(8, 0.0, 4 * gib, free_bytes=8 * gib) == 1
    assert placement_count(8, 2.0, 4 * gib, free_bytes=8 * gib) == 8  # views cost a shift each, not a copy
    assert placement_count(8, 0.0, 0, free_bytes=8 * gib) == 1  # no tensor inputs: nothing to place


def test_the_repetitions_and_the_time_budget_are_shared():
    config = EvalConfig(reps=100, min_reps=50, max_timing_s=8.0)
    one = per_placement(config, 8)
    assert (one.reps, one.min_reps, one.max_timing_s) == (13, 7, 1.0)
    assert per_placement(config, 1) is config
    assert (one.settle_ms, one.warmup) == (config.settle_ms, config.warmup)  # the first placement settles and warms
    later = per_placement(config, 8, 3)
    assert (later.reps, later.min_reps, later.settle_ms, later.warmup) == (13, 7, 0.0, 1)


def test_combine_keeps_the_mean_of_the_placements_and_names_a_spread():
    timings = [
        Timing(ref_ms=1.0, cand_ms=0.49, ref_spread=0.01, cand_spread=0.02, reps=13, note="cover raised"),
        Timing(ref_ms=1.0, cand_ms=0.55, ref_spread=0.01, cand_spread=0.04, reps=13, note="cover raised"),
    ]
    t = combine(timings)
    assert (t.ref_ms, t.cand_ms, t.reps) == (1.0, pytest.approx(0.52), 26)
    assert t.cand_spread == pytest.approx(0.03)
    assert t.note.startswith("cover raised; the candidate's time depends on where its inputs lie: 0.49-0.55 ms")
    assert "reference's" not in t.note
    steady = combine([Timing(ref_ms=1.0, cand_ms=0.5, reps=5)] * 3)
    assert steady.note == "" and steady.cand_ms == 0.5
    assert combine([timings[0]]) is timings[0]
    nothing = combine([Timing(note="timing skipped"), Timing(note="timing skipped")])
    assert nothing.speedup is None and nothing.note == "timing skipped"


class PlacementTimer:
    """Times nothing: calls each side once, records the config it got and the address the model saw, and says
    the candidate runs at 0.4 ms on even placements and 0.6 ms on odd ones."""

    def __init__(self):
        self.calls = []

    @hookimpl
    def kz_time_candidate(self, device, reference, candidate, config, rounds):
        pairs_through(rounds, reference, candidate, 1)
        self.calls.append(config)
        cand_ms = 0.4 if len(self.calls) % 2 else 0.6
        return Timing(ref_ms=1.0, cand_ms=cand_ms, reps=config.reps)


class Seen(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.addresses = []

    def forward(self, x, y):
        self.addresses.append(x.data_ptr())
        return x.sum() + y


def test_the_timing_stage_times_each_placement_and_keeps_their_mean(tmp_path):
    """The stage itself (as a worker runs it on a GPU; CPU tensors here, views so no device memory is asked
    about): one timer call per placement, each with its share of the repetitions, each on other memory."""
    timer = PlacementTimer()
    pm = new_plugin_manager(load_entry_points=False)
    pm.register(timer)
    config = EvalConfig(
        device="cuda", timing_placements=4, placement_shift_mib=SHIFT_MIB, reps=100, fresh_timed_inputs=False
    )
    problem = Problem(name="p", level=1, source="", path=None)
    job = EvalJob(problem, Candidate(problem="p", language="reference", level=1, sample=0, source=""), config)
    state = EvaluationState(job, pm, tmp_path, "cuda")
    reference, candidate = Seen(), Seen()
    x = torch.randn(256, 64)
    timing_pass(state, None, reference, candidate, ([x.clone(), 2.0], [x.clone(), 2.0]))
    assert [c.reps for c in timer.calls] == [25] * 4
    assert len(set(candidate.addresses)) == 4 and len(set(reference.addresses)) == 4
    assert state.fields["cand_ms"] == pytest.approx(0.5) and state.fields["timing_reps"] == 100
    assert "depends on where its inputs lie: 0.4-0.6 ms over 4 placements" in state.fields["timing_note"]
    assert state.fields["placement_ms"] == [[1.0, 0.4], [1.0, 0.6], [1.0, 0.4], [1.0, 0.6]]
    one = attrs.evolve(config, timing_placements=1)
    timer.calls.clear()
    state = EvaluationState(attrs.evolve(job, config=one), pm, tmp_path, "cuda")
    timing_pass(state, None, reference, candidate, ([x, 2.0], [x, 2.0]))
    assert [c.reps for c in timer.calls] == [100]


def test_no_placements_on_a_cpu(tmp_path):
    timer = PlacementTimer()
    pm = new_plugin_manager(load_entry_points=False)
    pm.register(timer)
    problem = Problem(name="p", level=1, source="", path=None)
    config = EvalConfig(fresh_timed_inputs=False)
    job = EvalJob(problem, Candidate(problem="p", language="reference", level=1, sample=0, source=""), config)
    x = torch.randn(8, 8)
    timing_pass(EvaluationState(job, pm, tmp_path, "cpu"), None, Seen(), Seen(), ([x, 1.0], [x, 1.0]))
    assert len(timer.calls) == 1
