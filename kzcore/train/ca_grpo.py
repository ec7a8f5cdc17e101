"""CA-GRPO rewards for the Coder: correctness always pays; the speed term switches on for a group only
when the group's correctness rate reaches tau. Exact when one task's group is spread over several
processes: raw verdicts are gathered, rewards computed on whole groups, and each process keeps its share.

    r_i = -hack_penalty                               if completion i is hack_suspected
          0                                           if i is not correct
          1                                           if i is correct and rho < tau
          1 + speed_weight * s_i                      if i is correct and rho >= tau

with rho = (correct in the group) / (group size) and, by ``speed``:
  "log":  s_i = clip(log2(speedup_i), -1, 1)                 (0 when no speedup was measured)
  "rank": s_i = rank of speedup_i among the group's correct ones, scaled to [0, 1] (ties share a rank)
tau > 1 never switches speed on (the paper's correctness-only ablation)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from kzcore.types import Status

SPEEDS = ("log", "rank")


@attrs.frozen
class Verdict:
    """What CA-GRPO needs of one evaluated completion."""

    group: str  # completions of one prompt share a group id
    status: Status = attrs.field(converter=Status)
    speedup: float | None = None

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT


@attrs.frozen
class CAGRPOConfig:
    tau: float = 0.5
    speed: str = attrs.field(default="log", validator=attrs.validators.in_(SPEEDS))
    speed_weight: float = 1.0
    hack_penalty: float = attrs.field(default=0.5, validator=attrs.validators.gt(0.0))


def _speed_terms(group: list[Verdict], speed: str) -> list[float]:
    if speed == "log":
        return [max(-1.0, min(1.0, math.log2(v.speedup))) if v.correct and v.speedup else 0.0 for v in group]
    timed = sorted({v.speedup for v in group if v.correct and v.speedup})
    if len(timed) < 2:
        return [0.0] * len(group)
    rank = {s: i / (len(timed) - 1) for i, s in enumerate(timed)}
    return [rank[v.speedup] if v.correct and v.speedup else 0.0 for v in group]


def group_rewards(group: list[Verdict], config: CAGRPOConfig) -> tuple[list[float], float, bool]:
    """Rewards for one complete group, its correctness rate, and whether the speed term was on."""
    rho = sum(v.correct for v in group) / len(group)
    speed_on = rho >= config.tau
    terms = _speed_terms(group, config.speed) if speed_on else [0.0] * len(group)
    rewards = []
    for v, s in zip(group, terms):
        if v.status is Status.HACK_SUSPECTED:
            rewards.append(-config.hack_penalty)
        elif not v.correct:
            rewards.append(0.0)
        else:
            rewards.append(1.0 + config.speed_weight * s)
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


def distributed_ca_grpo_rewards(local: Sequence[Verdict], config: CAGRPOConfig = CAGRPOConfig()) -> list[float]:
    """CA-GRPO over the verdicts of every process (torch.distributed, when initialised), returning this
    process's rewards in its local order. Each process passes only the completions it evaluated."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return ca_grpo_rewards(local, config)
    gathered: list[list[Verdict]] = [None] * dist.get_world_size()  # type: ignore[list-item]
    dist.all_gather_object(gathered, list(local))
    everything = [v for part in gathered for v in part]
    rewards = ca_grpo_rewards(everything, config)
    start = sum(len(part) for part in gathered[: dist.get_rank()])
    return rewards[start : start + len(local)]
