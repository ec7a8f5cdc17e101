"""CA-GRPO rewards for the Coder: correctness always pays; the speed term switches on for a group only
when the group's correctness rate reaches tau, and then only orders the group's correct samples. Exact when
one task's group is spread over several processes: raw verdicts are gathered, rewards computed on whole
groups, and each process keeps its share.

    r_i = -hack_penalty                               if completion i is hack_suspected
          0                                           if i is not correct (format, compile, crash, wrong, timeout)
          1                                           if i is correct and rho < tau
          1 + speed_weight * s_i,  s_i in [0, 1]      if i is correct and rho >= tau

with rho = (correct in the group) / (group size) and, by ``speed``:
  "log":  s_i = (clip(log2(speedup_i), -c, c) + c) / (2c), c = ``speed_clip`` (2: 0.25x pays 0, 1x 0.5, 4x 1)
  "rank": s_i = rank of speedup_i among the group's distinct speed tiers (below), scaled to [0, 1]
A correct sample with no measured speedup gets s_i = 0 (no speed claimed), as does every timed one of a
group under "rank" when the group has a single speed tier. So every correct sample earns >= 1 > 0 = every
failure > -hack_penalty = every suspected hack, whatever the speedups; a correct sample never earns less above
tau than below it. tau > 1 never switches speed on (the method's correctness-only ablation).

Noise is not signal: speedup_i above is not the raw measurement but its group's **speed tier**. Two timed
correct samples are within noise of each other when neither is faster than the other beyond their pair's
margin, i.e. max/min <= 1 + m with m = speedup_noise_margin(m_i, m_j) = max(1%, sqrt(m_i^2 + m_j^2)), m_i
being sample i's fast_p margin (kzcore.metrics.speedup_margin: its speedup's measured spread). The tiers are
the connected groups of that relation (a chain of samples each within noise of the next is one tier; sorted
by speedup a tier is a contiguous run), and every sample of a tier is paid for the geometric mean of the
tier's speedups. So two samples within noise of each other always get the same reward, and a group that is
all correct with speedups all within noise of each other gets identical rewards: zero advantage under any
``scale_rewards``, where std scaling would otherwise have blown timing noise up to advantages of about +-1.
A difference beyond noise still orders the tiers (every sample of a faster tier is paid more).

Rewards are rounded down to multiples of 2^-16 (a change below 2e-5), so that the float32 mean TRL takes of a
group of equal rewards is exactly that reward (sums of such values are exact while a group's rewards add up to
less than 256 in magnitude) and equal rewards give advantages of exactly 0, not float rounding.

Groups are the completions of one prompt: the Coder's dataset carries a per-prompt ``task_id`` (two prompts
of one problem in a batch are two groups), prefixed by the reward call so a prompt seen again in a later
step is a new group."""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from kzcore.metrics import speedup_margin
from kzcore.types import EvalResult, Status, speedup_noise_margin

SPEEDS = ("log", "rank")
# rewards are multiples of 1 / GRID (see the module docstring): float32 sums of them stay exact
GRID = 2**16


@attrs.frozen
class Verdict:
    """What CA-GRPO needs of one evaluated completion."""

    group: str  # completions of one prompt share a group id
    status: Status = attrs.field(converter=Status)
    speedup: float | None = None
    # the speedup's relative noise margin (kzcore.metrics.speedup_margin); None: unknown, the floor applies
    margin: float | None = None

    # the problem check flagged the task's problem (a trivial output passes it): a `correct` there is not paid
    degenerate: bool = False

    @classmethod
    def of(cls, group: str, result: EvalResult) -> Verdict:
        """The verdict of an evaluated completion: its status, speedup, the speedup's fast_p margin, and whether
        its problem was flagged by the problem check."""
        margin = speedup_margin(result) if result.speedup is not None else None
        return cls(group, result.status, result.speedup, margin, bool(result.problem_degenerate))

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT and not self.degenerate


@attrs.frozen
class CAGRPOConfig:
    tau: float = attrs.field(default=0.5, validator=attrs.validators.ge(0.0))
    speed: str = attrs.field(default="log", validator=attrs.validators.in_(SPEEDS))
    speed_weight: float = attrs.field(default=1.0, validator=attrs.validators.ge(0.0))
    speed_clip: float = attrs.field(default=2.0, validator=attrs.validators.gt(0.0))  # log2 range of "log"
    hack_penalty: float = attrs.field(default=0.5, validator=attrs.validators.gt(0.0))


def _timed(v: Verdict) -> bool:
    return v.correct and v.speedup is not None and math.isfinite(v.speedup) and v.speedup > 0


def _within_noise(a: Verdict, b: Verdict) -> bool:
    """Neither timed sample is faster than the other beyond their pair's noise margin (fast_p's test, with
    the margin of the pair: the two speedups' margins combined as fast_p combines the two timings' spreads)."""
    lo, hi = sorted((a.speedup, b.speedup))
    return hi <= lo * (1.0 + speedup_noise_margin(a.margin, b.margin))


def speed_tiers(group: list[Verdict]) -> dict[int, float]:
    """Index in ``group`` of each timed correct sample → its tier's speedup: the geometric mean of the speedups
    of its tier, the connected set of samples within noise of each other (chains included)."""
    timed = [i for i, v in enumerate(group) if _timed(v)]
    tier = {i: i for i in timed}  # union-find over the pairs within noise

    def root(i: int) -> int:
        while tier[i] != i:
            tier[i] = tier[tier[i]]
            i = tier[i]
        return i

    for n, i in enumerate(timed):
        for j in timed[n + 1 :]:
            if _within_noise(group[i], group[j]):
                tier[root(i)] = root(j)
    members: dict[int, list[int]] = {}
    for i in timed:
        members.setdefault(root(i), []).append(i)
    out = {}
    for same in members.values():
        if len(same) == 1:
            out[same[0]] = group[same[0]].speedup
            continue
        speed = 2.0 ** (math.fsum(math.log2(group[i].speedup) for i in same) / len(same))
        for i in same:
            out[i] = speed
    return out


def _speed_terms(group: list[Verdict], config: CAGRPOConfig) -> list[float]:
    """Each sample's speed term in [0, 1], from its speed tier; 0 for samples that are not correct or not timed."""
    tiers = speed_tiers(group)
    if config.speed == "log":
        c = config.speed_clip
        return [(max(-c, min(c, math.log2(tiers[i]))) + c) / (2 * c) if i in tiers else 0.0 for i in range(len(group))]
    distinct = sorted(set(tiers.values()))
    if len(distinct) < 2:
        return [0.0] * len(group)
    rank = {s: n / (len(distinct) - 1) for n, s in enumerate(distinct)}
    return [rank[tiers[i]] if i in tiers else 0.0 for i in range(len(group))]


def _on_grid(reward: float) -> float:
    return math.floor(reward * GRID) / GRID


def group_rewards(group: list[Verdict], config: CAGRPOConfig) -> tuple[list[float], float, bool]:
    """Rewards for one complete group, its correctness rate, and whether the speed term was on."""
    rho = sum(v.correct for v in group) / len(group)
    speed_on = rho >= config.tau
    terms = _speed_terms(group, config) if speed_on else [0.0] * len(group)
    rewards = []
    for v, s in zip(group, terms):
        if v.status is Status.HACK_SUSPECTED:
            rewards.append(_on_grid(-config.hack_penalty))
        elif not v.correct:
            rewards.append(0.0)
        else:
            rewards.append(_on_grid(1.0 + config.speed_weight * s))
    return rewards, rho, speed_on


def ca_grpo_rewards(verdicts: Sequence[Verdict], config: CAGRPOConfig = CAGRPOConfig()) -> list[float]:
    """Rewards for ``verdicts`` (any order; groups identified by ``group``), in the same order."""
    groups: dict[str, list[int]] = {}
    for i, v in enumerate(verdicts):
        groups.setdefault(v.group, []).append(i)
    out = [0.0] * len(verdicts)
    for members in groups.values():
        rewards, _, _ = group_rewards([verdicts[i] for i in members], config)
        for i, r in zip(members, rewards):
            out[i] = r
    return out


def gather_verdicts(local: Sequence[Verdict]) -> tuple[list[Verdict], int]:
    """Every process's verdicts in rank order (torch.distributed, when initialised) and where this process's
    share starts; without a process group, ``local`` itself and 0."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return list(local), 0
    gathered: list[list[Verdict]] = [None] * dist.get_world_size()  # type: ignore[list-item]
    dist.all_gather_object(gathered, list(local))
    start = sum(len(part) for part in gathered[: dist.get_rank()])
    return [v for part in gathered for v in part], start


def distributed_ca_grpo_rewards(local: Sequence[Verdict], config: CAGRPOConfig = CAGRPOConfig()) -> list[float]:
    """CA-GRPO over the verdicts of every process (torch.distributed, when initialised), returning this
    process's rewards in its local order. Each process passes only the completions it evaluated."""
    everything, start = gather_verdicts(local)
    rewards = ca_grpo_rewards(everything, config)
    return rewards[start : start + len(local)]
