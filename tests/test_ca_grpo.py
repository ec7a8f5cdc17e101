"""CA-GRPO: pinned rewards for hand-made groups below and above tau, hacks paid below incorrect, tau > 1
turns speed off, the method's order as a property over random groups (every correct sample above every
failure, whatever the speedups), rewards computed by 2 processes that each hold half of every group equal
the single-process ones, and groups keyed by prompt, not by problem, through the Coder's reward function in
2 processes."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kzcore.train.ca_grpo import CAGRPOConfig, Verdict, ca_grpo_rewards, group_rewards
from kzcore.types import Status

C, W, H = "correct", "incorrect", "hack_suspected"


def group(*items, gid="g"):
    return [Verdict(gid, s, sp) for s, sp in items]


def test_below_tau_only_correctness_pays():
    g = group((C, 4.0), (W, None), (W, None), (H, None), (C, 0.5))  # rho = 0.4 < 0.5
    rewards, rho, speed_on = group_rewards(g, CAGRPOConfig())
    assert rho == pytest.approx(0.4) and not speed_on
    assert rewards == [1.0, 0.0, 0.0, -0.5, 1.0]


def test_at_tau_log_speed_term_switches_on():
    g = group((C, 4.0), (C, 0.5), (C, math.sqrt(2)), (W, None), ("compile_error", None), (C, None))  # rho = 4/6
    rewards, rho, speed_on = group_rewards(g, CAGRPOConfig(tau=0.5, speed="log", speed_weight=1.0))
    assert speed_on
    # s = (clip(log2 x, -2, 2) + 2) / 4: 4x -> 1, 0.5x -> 0.25, sqrt(2)x -> 0.625; untimed correct: 0
    assert rewards == pytest.approx([2.0, 1.25, 1.625, 0.0, 0.0, 1.0])


def test_exactly_tau_counts_as_reached():
    rewards, rho, speed_on = group_rewards(group((C, 2.0), (W, None)), CAGRPOConfig(tau=0.5))
    assert rho == 0.5 and speed_on and rewards == [1.75, 0.0]


def test_rank_speed_term():
    g = group((C, 1.2), (C, 3.0), (C, 1.2), (C, 0.9), (W, None))
    rewards, _, _ = group_rewards(g, CAGRPOConfig(speed="rank", speed_weight=0.5))
    assert rewards == pytest.approx([1.25, 1.5, 1.25, 1.0, 0.0])


def test_hack_is_paid_below_incorrect_and_tau_above_one_disables_speed():
    g = group((C, 8.0), (C, 8.0), (H, 100.0), (W, None))
    on, _, _ = group_rewards(g, CAGRPOConfig())
    off, _, speed_on = group_rewards(g, CAGRPOConfig(tau=1.1))
    assert on == [2.0, 2.0, -0.5, 0.0]
    assert not speed_on and off == [1.0, 1.0, -0.5, 0.0]
    assert min(on) < 0.0 == on[3]


def test_groups_are_found_by_id_in_any_order():
    a = group((C, 2.0), (C, 2.0), gid="a")
    b = group((C, 2.0), (W, None), (W, None), gid="b")
    mixed = [b[0], a[0], b[1], a[1], b[2]]
    assert ca_grpo_rewards(mixed) == [1.0, 1.75, 0.0, 1.75, 0.0]


def test_slow_correct_kernel_still_beats_every_failure_and_its_own_below_tau_reward():
    # the bug this pins: with log2 clipped to [-1, 1] and no offset, a correct 0.5x kernel scored 0 above tau
    # (as much as a wrong one) and a correct 0.7x kernel less than below tau
    above, _, on = group_rewards(group((C, 0.5), (C, 0.7), (C, 0.01), (W, None)), CAGRPOConfig(tau=0.5))
    below, _, off = group_rewards(group((C, 0.7), (W, None), (W, None)), CAGRPOConfig(tau=0.5))
    assert on and not off
    assert min(above[:3]) >= 1.0 > above[3] == 0.0
    assert above[1] >= below[0] == 1.0
    assert above[2] < above[0] < above[1]  # speed still orders the correct ones


FAILURES = [s for s in Status if s not in (Status.CORRECT, Status.HACK_SUSPECTED)]
speedups = st.one_of(st.none(), st.floats(1e-4, 1e4), st.sampled_from([1e-6, 0.01, 0.5, 1.0, 100.0, 1e6]))
verdicts = st.tuples(st.sampled_from([Status.CORRECT] * 3 + [Status.HACK_SUSPECTED] + FAILURES), speedups)


@settings(max_examples=400, deadline=None)
@given(
    items=st.lists(verdicts, min_size=1, max_size=16),
    tau=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 1.1]),
    speed=st.sampled_from(["log", "rank"]),
    weight=st.floats(0.0, 5.0),
)
def test_property_correct_first_then_fast(items, tau, speed, weight):
    g = group(*items)
    cfg = CAGRPOConfig(tau=tau, speed=speed, speed_weight=weight)
    rewards, rho, speed_on = group_rewards(g, cfg)
    correct = [r for v, r in zip(g, rewards) if v.correct]
    failed = [r for v, r in zip(g, rewards) if not v.correct and v.status is not Status.HACK_SUSPECTED]
    hacks = [r for v, r in zip(g, rewards) if v.status is Status.HACK_SUSPECTED]
    # every correct sample is paid more than every failure; a suspected hack never more than an honest failure
    assert all(c > f for c in correct for f in failed + hacks)
    assert all(h < 0.0 for h in hacks) and all(f == 0.0 for f in failed)
    # bounded: speed only adds up to speed_weight on top of correctness, and only at or above tau
    assert all(1.0 <= c <= 1.0 + weight + 1e-12 for c in correct)
    if rho < tau:
        assert not speed_on and all(c == 1.0 for c in correct)
    # at or above tau the speed term orders correct samples by speedup (untimed ones at the bottom)
    if speed_on and weight > 0:
        timed = sorted((v.speedup, r) for v, r in zip(g, rewards) if v.correct and v.speedup is not None)
        assert all(a[1] <= b[1] + 1e-12 for a, b in zip(timed, timed[1:]))
        untimed = [r for v, r in zip(g, rewards) if v.correct and v.speedup is None]
        assert all(u <= r + 1e-12 for u in untimed for _, r in timed)


def test_two_processes_equal_single_process(tmp_path, rank_processes):
    rows = []
    for gid, items in {
        "p1": [(C, 1.5), (C, 3.0), (W, None), (C, 0.7), (H, 50.0)],  # rho 0.6: speed on
        "p2": [(C, 2.0), (W, None), (W, None), ("timeout", None), (C, 4.0)],  # rho 0.4: off
        "p3": [(C, 1.1), (C, 1.1), (C, 2.2), (C, 0.9), (C, 5.0)],
    }.items():
        rows += [{"group": gid, "status": s, "speedup": sp} for s, sp in items]
    data = tmp_path / "rows.json"
    data.write_text(json.dumps(rows))
    procs = rank_processes(lambda r: [str(data), str(tmp_path / f"r{r}.json")])
    for p in procs:
        assert p.wait(120) == 0
    per_rank = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2)]
    distributed = [None] * len(rows)
    for r in range(2):
        for j, i in enumerate(range(r, len(rows), 2)):
            distributed[i] = per_rank[r][j]
    single = ca_grpo_rewards([Verdict(**x) for x in rows], CAGRPOConfig(tau=0.5, speed="rank"))
    assert distributed == pytest.approx(single)
    # and a rank alone (no gathering) would have been wrong: p2 split 3/2 looks like rho 1/3 and 1/2
    assert ca_grpo_rewards([Verdict(**x) for x in rows[1::2]], CAGRPOConfig(tau=0.5, speed="rank")) != per_rank[1]


def test_two_prompts_of_one_problem_are_two_groups_across_two_processes(tmp_path, rank_processes):
    """Two prompts of 1_ReLU in one batch (task ids 0 and 1), each prompt's 2 generations split over 2 ranks
    (gloo) through CoderReward: prompt 0 is all correct (rho 1 >= tau 0.75: the speed term is on), prompt 1
    all wrong. Keyed by problem, the merged group's rho 0.5 < tau would switch speed off for prompt 0."""
    procs = rank_processes(lambda r: ["coder-reward", str(tmp_path / f"r{r}.json")])
    for p in procs:
        assert p.wait(120) == 0
    per_rank = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2)]
    for out in per_rank:
        # log speed term of a 2x kernel: (1 + 2) / 4 = 0.75 -> 1.75
        assert out["rewards"] == pytest.approx([1.75, 0.0])
        assert sorted(out["group_correct_rates"]) == [0.0, 1.0]
        # the phase's tally (measured pass rate per task, every process's verdicts): 2 of 4 for 1_ReLU
        assert out["tally"] == {"1/1_ReLU": [2, 4]}


def test_a_correct_result_on_a_problem_the_check_flagged_is_not_paid():
    """On a problem whose trivial output passes the output check (`problem_degenerate`), `correct` says nothing
    of the kernel: CA-GRPO pays it as a failure, and distillation and the RFT control keep none of them."""
    from kzcore.train.distill import keep
    from kzcore.types import EvalResult

    plain = EvalResult(problem="p", level=1, language="triton", sample=0, status=Status.CORRECT, speedup=2.0)
    flagged = EvalResult(
        problem="p", level=1, language="triton", sample=1, status=Status.CORRECT, speedup=2.0,
        problem_degenerate="a zeros output passes the output check",
    )  # fmt: skip
    assert plain.verified and flagged.correct and not flagged.verified
    verdicts = [Verdict.of("g", plain), Verdict.of("g", flagged)]
    assert verdicts[1].degenerate and not verdicts[1].correct
    rewards = ca_grpo_rewards(verdicts, CAGRPOConfig(tau=0.5))
    assert rewards[0] >= 1.0 and rewards[1] == 0.0
    assert keep(plain, only_faster=False) and not keep(flagged, only_faster=False)
