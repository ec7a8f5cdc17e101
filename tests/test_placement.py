"""Timing on several placements of the inputs (kzcore/evaluate/placement.py): the placements hold the
same values elsewhere, the timing stage calls the timer once and its pairs go round the placements
(kzcore.timed.TimedRounds), and the stage keeps the mean of the per-placement medians of the samples the timer
handed over."""

from __future__ import annotations

import pytest
import torch

from kzcore import hookimpl
from kzcore.evaluate.placement import MIB, Placements, placement_count, placements_for
from kzcore.evaluate.stage import EvaluationState
from kzcore.evaluate.timing import timing_pass
from kzcore.plugins import new_plugin_manager
from kzcore.types import Candidate, EvalConfig, EvalJob, Problem, Timing

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


def test_placements_index_like_a_sequence_and_a_view_is_filled_as_it_is_indexed():
    original = inputs()
    copies = Placements(original, 3)
    assert len(copies) == 3 and copies[2] is copies[2]  # separate copies: made once, kept
    assert all(torch.equal(copies[j][0], original[0]) for j in range(3))
    with pytest.raises(IndexError):
        copies[3]
    views = Placements(original, 3, SHIFT_MIB)
    assert views[0] is original
    views[1][0].zero_()  # the next view overlaps it: indexing again fills it anew
    assert torch.equal(views[2][0], original[0]) and torch.equal(views[1][0], original[0])


class PlacementTimer:
    """Times nothing: runs ``pairs`` pairs through the rounds, records the config it got, and hands the rounds a
    candidate sample of 0.4 ms on even placements and 0.6 ms on odd ones (the reference 1.0 ms everywhere);
    ``samples`` False hands over none. Its own medians say 2.0 / 1.0 ms."""

    def __init__(self, pairs: int = 12, samples: bool = True):
        self.pairs, self.samples = pairs, samples
        self.calls = []

    @hookimpl
    def kz_time_candidate(self, device, reference, candidate, config, rounds):
        self.calls.append(config)
        for i in range(self.pairs):
            rounds.begin(last=i == self.pairs - 1)
            cand_ms = 0.4 if rounds.index % 2 == 0 else 0.6
            rounds.took("reference", reference(), 1.0 if self.samples else None)
            rounds.took("candidate", candidate(), cand_ms if self.samples else None)
            rounds.end()
        return Timing(ref_ms=2.0, cand_ms=1.0, reps=self.pairs, note="own medians")


class Seen(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.addresses = []

    def forward(self, x, y):  # no PyTorch compute: the candidate side runs under the op guard
        self.addresses.append(x.data_ptr())
        return x.clone()


def placement_state(tmp_path, timer, device="cuda", **settings):
    pm = new_plugin_manager(load_entry_points=False)
    pm.register(timer)
    config = EvalConfig(device=device, placement_shift_mib=SHIFT_MIB, fresh_timed_inputs=False, **settings)
    problem = Problem(name="p", level=1, source="", path=None)
    job = EvalJob(problem, Candidate(problem="p", language="reference", level=1, sample=0, source=""), config)
    return EvaluationState(job, pm, tmp_path, device)


def test_one_timer_call_whose_pairs_go_round_the_placements(tmp_path):
    """The stage itself (as a worker runs it on a GPU; CPU tensors here, views so no device memory is asked
    about): one timer call with the whole config, pair i on placement i mod 4, each placement other memory,
    and the mean of the per-placement medians kept, not the timer's own."""
    timer = PlacementTimer(pairs=12)
    state = placement_state(tmp_path, timer, timing_placements=4, reps=100)
    reference, candidate = Seen(), Seen()
    x = torch.randn(256, 64)
    timing_pass(state, None, reference, candidate, ([x.clone(), 2.0], [x.clone(), 2.0]))
    assert len(timer.calls) == 1 and timer.calls[0].reps == 100
    assert candidate.addresses[:4] == candidate.addresses[4:8] and len(set(candidate.addresses)) == 4
    assert len(set(reference.addresses)) == 4 and set(reference.addresses).isdisjoint(candidate.addresses)
    assert state.fields["cand_ms"] == pytest.approx(0.5) and state.fields["ref_ms"] == 1.0
    assert state.fields["timing_reps"] == 12 and state.fields["cand_spread"] == 0.0
    assert "depends on where its inputs lie: 0.4-0.6 ms over 4 placements" in state.fields["timing_note"]
    assert "reference's time" not in state.fields["timing_note"]
    assert state.fields["placement_ms"] == [[1.0, 0.4], [1.0, 0.6], [1.0, 0.4], [1.0, 0.6]]


def test_a_timer_that_hands_over_no_samples_keeps_its_own_medians_with_a_note(tmp_path):
    state = placement_state(tmp_path, PlacementTimer(pairs=6, samples=False), timing_placements=4)
    x = torch.randn(64, 64)
    timing_pass(state, None, Seen(), Seen(), ([x.clone(), 2.0], [x.clone(), 2.0]))
    assert (state.fields["ref_ms"], state.fields["cand_ms"], state.fields["placement_ms"]) == (2.0, 1.0, [])
    assert "the timer's medians over all 4 placements (it handed the rounds no samples)" in state.fields["timing_note"]


def test_one_placement_keeps_the_timers_figures(tmp_path):
    state = placement_state(tmp_path, PlacementTimer(pairs=3), timing_placements=1)
    x = torch.randn(8, 8)
    timing_pass(state, None, Seen(), Seen(), ([x, 1.0], [x, 1.0]))
    assert (state.fields["ref_ms"], state.fields["cand_ms"], state.fields["placement_ms"]) == (2.0, 1.0, [])


def test_no_placements_on_a_cpu(tmp_path):
    timer = PlacementTimer(pairs=2)
    state = placement_state(tmp_path, timer, device="cpu", timing_placements=8)
    x = torch.randn(8, 8)
    seen = Seen()
    timing_pass(state, None, Seen(), seen, ([x, 1.0], [x, 1.0]))
    assert len(timer.calls) == 1 and set(seen.addresses) == {x.data_ptr()}


def test_the_states_seed_gives_torch_manual_seeds_random_stream(tmp_path):
    """`EvaluationState.seed` skips the calls torch.manual_seed queues for backends a worker never uses; the
    draws it seeds are the same."""
    state = placement_state(tmp_path, PlacementTimer(pairs=1), device="cpu")
    state.seed(1234)
    ours = (torch.randn(5), torch.rand(3), torch.randint(0, 100, (4,)))
    torch.manual_seed(1234)
    theirs = (torch.randn(5), torch.rand(3), torch.randint(0, 100, (4,)))
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    state.seed(99)
    assert not torch.equal(torch.randn(5), ours[0])
