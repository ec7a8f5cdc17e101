"""Noise is not signal: a CA-GRPO group whose speedups differ only within their measured spreads gets identical
rewards, hence advantages of exactly 0 as TRL computes them (whatever ``scale_rewards``); a speed difference
beyond noise keeps its advantage; groups below tau pay correctness only, as before; and ``[coder]
scale_rewards`` parses, refuses a bad value in one line, reaches TRL's GRPOConfig and the plan."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kzcore.metrics import is_faster
from kzcore.train.ca_grpo import GRID, CAGRPOConfig, Verdict, ca_grpo_rewards, group_rewards, speed_tiers
from kzcore.train.coder import SCALE_REWARDS, CoderReward, GRPOSettings, grpo_config
from kzcore.train.config import ConfigError, load_config
from kzcore.types import EvalConfig, EvalResult, Problem, Status

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent


def result(speedup: float | None, spread: float = 0.02, status: str = "correct", sample: int = 0) -> EvalResult:
    """A verdict as the evaluator files it: reference and candidate timed with relative IQR ``spread`` each."""
    timed = speedup is not None
    return EvalResult(
        "p", 1, "triton", sample, status, speedup=speedup,
        ref_spread=spread if timed else None, cand_spread=spread if timed else None,
    )  # fmt: skip


def verdicts(*items, gid: str = "g") -> list[Verdict]:
    """(speedup, spread) or (status, speedup, spread) items → the group's verdicts."""
    out = []
    for i, item in enumerate(items):
        status, speedup, spread = item if len(item) == 3 else ("correct", *item)
        out.append(Verdict.of(gid, result(speedup, spread, status, sample=i)))
    return out


def trl_advantages(rewards: list[float], group_size: int, scale_rewards: str) -> list[float]:
    """TRL 1.16's GRPOTrainer advantages for one reward function (multi_objective_aggregation
    "sum_then_normalize"): float32 rewards, minus the group's mean, divided by the group's or the batch's std
    (+1e-4) unless scale_rewards is "none"."""
    from trl.trainer.utils import nanstd

    r = torch.tensor(rewards, dtype=torch.float32)
    mean = torch.nanmean(r.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)
    if scale_rewards == "batch":
        std = nanstd(r).expand_as(r)
    else:
        std = nanstd(r.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)
    advantages = r - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0).tolist()


# an all-correct group whose speedups differ by at most 3%, each timed with 2.5% spreads on both sides: every
# speedup's fast_p margin is sqrt(0.025^2 + 0.025^2) = 3.5%, every pair's sqrt(2) x that = 5%, so the fastest
# and the slowest (1.03 / 1.0) are within noise of each other, and so is every other pair
NOISE = [(1.0, 0.025), (1.02, 0.025), (1.01, 0.025), (1.03, 0.025), (1.015, 0.025)]


def test_the_noise_group_is_within_noise_pair_by_pair():
    results = [result(s, sp) for s, sp in NOISE]
    pair = math.hypot(*(results[0].speedup_margin,) * 2)
    assert all(max(a.speedup, b.speedup) <= min(a.speedup, b.speedup) * (1 + pair) for a in results for b in results)
    # no speedup of the group is faster than another by fast_p's own test either
    assert not any(is_faster(a, b.speedup) for a in results for b in results)


@pytest.mark.parametrize("speed", ["log", "rank"])
@pytest.mark.parametrize("scale_rewards", SCALE_REWARDS)
def test_all_correct_group_within_noise_gets_identical_rewards_and_zero_advantage(speed, scale_rewards):
    group = verdicts(*NOISE)
    rewards, rho, speed_on = group_rewards(group, CAGRPOConfig(speed=speed))
    assert rho == 1.0 and speed_on
    assert len(set(rewards)) == 1  # identical, bit for bit
    assert trl_advantages(rewards, len(group), scale_rewards) == [0.0] * len(group)  # exactly, in float32
    # the speed term is still paid, for the group's one tier: its geometric-mean speedup (log) or nothing (rank)
    tier = math.prod(s for s, _ in NOISE) ** (1 / len(NOISE))
    expected = 1.0 + ((math.log2(tier) + 2) / 4 if speed == "log" else 0.0)
    assert rewards[0] == pytest.approx(expected, abs=1 / GRID)


def test_without_the_tiers_std_scaling_turned_this_noise_into_advantages():
    """The measured problem: each sample paid for its own speedup, TRL's group std scaling made the noise loud."""
    raw = [1.0 + (math.log2(s) + 2) / 4 for s, _ in NOISE]
    assert max(abs(a) for a in trl_advantages(raw, len(raw), "group")) > 0.8


def test_a_whole_batch_of_noise_groups_and_correctness_groups():
    """Noise groups beside groups with a correctness spread: the noise groups' advantages are 0 in every
    scaling, the others keep theirs."""
    noise_a = verdicts(*NOISE, gid="a")
    noise_b = verdicts((2.0, 0.05), (2.1, 0.05), (1.95, 0.05), (2.05, 0.05), (2.0, 0.05), gid="b")
    mixed = verdicts((1.5, 0.02), ("incorrect", None, 0.0), (1.5, 0.02), (1.5, 0.02), (1.6, 0.02), gid="c")
    rewards = ca_grpo_rewards(noise_a + noise_b + mixed)
    for scale in SCALE_REWARDS:
        adv = trl_advantages(rewards, 5, scale)
        assert adv[:10] == [0.0] * 10
        assert adv[11] < 0.0 < adv[10]  # the wrong sample of group c is pushed down, its correct ones up


@pytest.mark.parametrize("speed", ["log", "rank"])
@pytest.mark.parametrize("scale_rewards", SCALE_REWARDS)
def test_a_speed_difference_beyond_noise_keeps_its_advantage(speed, scale_rewards):
    # two tiers: about 1x and about 2x, each timed with 2% spreads
    group = verdicts((1.0, 0.02), (1.01, 0.02), (2.0, 0.02), (0.99, 0.02), (2.03, 0.02))
    rewards, _, speed_on = group_rewards(group, CAGRPOConfig(speed=speed))
    assert speed_on
    assert rewards[0] == rewards[1] == rewards[3] < rewards[2] == rewards[4]  # within a tier equal, tiers ordered
    adv = trl_advantages(rewards, len(group), scale_rewards)
    assert adv[2] > 0.0 > adv[0] and adv[2] == adv[4] and adv[0] == adv[1] == adv[3]


def test_the_same_gap_is_noise_or_signal_by_the_measured_spreads():
    """1.0x against 1.08x: beyond noise when timed tightly (2% spreads), within it when timed loosely (8%)."""
    tight = group_rewards(verdicts((1.0, 0.02), (1.08, 0.02)), CAGRPOConfig())[0]
    loose = group_rewards(verdicts((1.0, 0.08), (1.08, 0.08)), CAGRPOConfig())[0]
    assert tight[0] < tight[1] and loose[0] == loose[1]


def test_a_chain_within_noise_is_one_tier_and_untimed_samples_stay_out():
    # 1.0 ~ 1.035 ~ 1.07 step by step (4% pair margins), though 1.0 and 1.07 are 7% apart: one tier
    group = verdicts((1.0, 0.02), (1.035, 0.02), (1.07, 0.02), (None, 0.0), (1.5, 0.02))
    tiers = speed_tiers(group)
    assert tiers[0] == tiers[1] == tiers[2] < tiers[4] == 1.5 and 3 not in tiers
    rewards, _, _ = group_rewards(group, CAGRPOConfig())
    assert rewards[3] == 1.0 < rewards[0] == rewards[1] == rewards[2] < rewards[4]


def test_a_verdict_without_spreads_uses_the_margin_floor():
    # results files and hand-made verdicts may know no spread: fast_p's 1% floor still applies
    assert Verdict.of("g", result(1.0, spread=0.0)).margin == pytest.approx(0.01)
    bare = [Verdict("g", "correct", 1.0), Verdict("g", "correct", 1.01), Verdict("g", "correct", 1.2)]
    rewards, _, _ = group_rewards(bare, CAGRPOConfig())
    assert rewards[0] == rewards[1] < rewards[2]


@pytest.mark.parametrize("speed", ["log", "rank"])
def test_correctness_only_groups_below_tau_are_unchanged(speed):
    # rho = 2/5 < tau = 0.5: speed is off, spreads change nothing, the rewards are those of before
    items = [(4.0, 0.3), ("incorrect", None, 0.0), ("compile_error", None, 0.0), ("hack_suspected", 9.0, 0.02)]
    group = verdicts(*items, (0.5, 0.0))
    rewards, rho, speed_on = group_rewards(group, CAGRPOConfig(speed=speed))
    assert rho == pytest.approx(0.4) and not speed_on
    assert rewards == [1.0, 0.0, 0.0, -0.5, 1.0]
    bare = [Verdict(v.group, v.status, v.speedup) for v in group]  # no margins: the same rewards
    assert group_rewards(bare, CAGRPOConfig(speed=speed))[0] == rewards
    adv = trl_advantages(rewards, len(rewards), "group")
    assert adv[0] == adv[4] > 0.0 > adv[1] == adv[2] > adv[3]
    # tau > 1 (the correctness-only ablation): an all-correct group of very different speeds pays 1 each
    fast_and_slow = verdicts((4.0, 0.01), (0.25, 0.01), (1.0, 0.01))
    assert group_rewards(fast_and_slow, CAGRPOConfig(tau=1.1, speed=speed))[0] == [1.0, 1.0, 1.0]


margins = st.one_of(st.none(), st.floats(0.0, 0.3))
timed = st.tuples(st.floats(0.05, 20.0), margins)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(timed, min_size=1, max_size=12), speed=st.sampled_from(["log", "rank"]))
def test_property_within_noise_pays_alike_beyond_noise_pays_more(items, speed):
    group = [Verdict("g", Status.CORRECT, s, m) for s, m in items]
    rewards, _, _ = group_rewards(group, CAGRPOConfig(speed=speed))
    assert all(r * GRID == int(r * GRID) for r in rewards)  # on the grid: TRL's float32 sums stay exact
    for a, ra in zip(group, rewards):
        for b, rb in zip(group, rewards):
            lo, hi = sorted((a.speedup, b.speedup))
            pair = max(0.01, math.hypot(a.margin or 0.0, b.margin or 0.0))
            if hi <= lo * (1 + pair):
                assert ra == rb  # within the pair's noise: the same reward
            if a.speedup < b.speedup:
                assert ra <= rb  # never paid less for being faster
    if len(set(rewards)) == 1:
        assert trl_advantages(rewards, len(rewards), "group") == [0.0] * len(rewards)


class SpreadPool:
    """An executor whose verdict is spelled in the completion: "SPEEDUP@SPREAD" (correct, timed with that
    relative spread on both sides) or anything else (incorrect)."""

    def map(self, jobs):
        out = []
        for job in jobs:
            c = job.candidate
            speedup, _, spread = c.completion.partition("@")
            if spread:
                out.append(result(float(speedup), float(spread), sample=c.sample))
            else:
                out.append(result(None, status="incorrect", sample=c.sample))
        return out


def test_the_coder_reward_hands_the_spreads_to_ca_grpo(tmp_path):
    problem = Problem("p", "", level=1)
    reward = CoderReward([problem], "triton", SpreadPool(), EvalConfig(), CAGRPOConfig(), tmp_path / "r.jsonl")
    noisy = [f"{s}@{sp}" for s, sp in NOISE]
    real = ["1.0@0.02", "1.0@0.02", "2.0@0.02", "2.0@0.02", "wrong"]
    rewards = reward(
        prompts=[[]] * 10, completions=noisy + real, problem=["p"] * 10, level=[1] * 10, task_id=["0"] * 5 + ["1"] * 5
    )
    assert len(set(rewards[:5])) == 1 and rewards[5] == rewards[6] < rewards[7] == rewards[8]
    assert trl_advantages(rewards, 5, "group")[:5] == [0.0] * 5
    row = (tmp_path / "r.jsonl").read_text()
    assert '"frac_groups_zero_std": 0.5' in row  # the noise group has no gradient, and is logged as such


# --- [coder] scale_rewards -------------------------------------------------------------------------------


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(body)
    return path


def test_scale_rewards_defaults_to_none_and_parses(tmp_path):
    assert GRPOSettings().scale_rewards == "none"
    config = load_config(write(tmp_path, '[coder]\nscale_rewards = "batch"\n[proposer_grpo]\nscale_rewards = true\n'))
    assert config.coder.scale_rewards == "batch"
    assert config.proposer_grpo.scale_rewards == "group"  # TRL's boolean spelling, as the name TRL gives it
    assert load_config(write(tmp_path, "[coder]\nscale_rewards = false\n")).coder.scale_rewards == "none"
    assert load_config(ROOT / "configs" / "smoke.toml").coder.scale_rewards == "none"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"std"', "[coder]: scale_rewards must be one of 'none', 'batch', 'group' (or true / false), got 'std'"),
        ("1", "[coder] scale_rewards must be a string, got 1"),
    ],
)
def test_a_bad_scale_rewards_is_a_one_line_config_error(tmp_path, value, message):
    path = write(tmp_path, f"[coder]\nscale_rewards = {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: {message}"
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="scale_rewards must be one of"):
        GRPOSettings(scale_rewards="Group")


@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_scale_rewards_reaches_trls_grpo_config(tmp_path, scale):
    pytest.importorskip("trl")
    args = grpo_config(GRPOSettings(use_cpu=True, scale_rewards=scale), tmp_path)
    assert args.scale_rewards == scale


def test_scale_rewards_is_in_the_plan_and_the_resume_identity(plugins, tmp_path):
    from kzcore.train.plan import format_plan, training_plan
    from kzcore.train.trl_run import identity_of

    config = load_config(
        write(tmp_path, f'extends = "{ROOT / "configs" / "smoke.toml"}"\n[coder]\nscale_rewards = "batch"\n')
    )
    plan = training_plan(config, 1, pm=plugins("kz_triton", "kz_models"))
    assert plan["coder_batch"]["scale_rewards"] == "batch" and plan["proposer_batch"]["scale_rewards"] == "none"
    lines = format_plan(plan)
    coder = next(line for line in lines if line.startswith("Coder step:"))
    proposer = next(line for line in lines if line.startswith("Proposer step:"))
    assert coder.endswith("(reward - group mean) / batch std (scale_rewards batch)")
    assert proposer.endswith("advantages = reward - group mean (scale_rewards none)")
    # a checkpoint trained with another scaling is another run: never resumed from silently
    assert identity_of("m", config.coder)["settings"]["scale_rewards"] == "batch"
