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
  "rank": s_i = rank of speedup_i among the group's timed correct samples, scaled to [0, 1] (ties share a rank)
A correct sample with no measured speedup gets s_i = 0 (no speed claimed), as does the only timed one of a
group under "rank". So every correct sample earns >= 1 > 0 = every failure > -hack_penalty = every suspected
hack, whatever the speedups; a correct sample never earns less above tau than below it. tau > 1 never
switches speed on (the method's correctness-only ablation).

Groups are the completions of one prompt: the Coder's dataset carries a per-prompt ``task_id`` (two prompts
of one problem in a batch are two groups), prefixed by the reward call so a prompt seen again in a later
step is a new group."""

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
    tau: float = attrs.field(default=0.5, validator=attrs.validators.ge(0.0))
    speed: str = attrs.field(default="log", validator=attrs.validators.in_(SPEEDS))
    speed_weight: float = attrs.field(default=1.0, validator=attrs.validators.ge(0.0))
    speed_clip: float = attrs.field(default=2.0, validator=attrs.validators.gt(0.0))  # log2 range of "log"
    hack_penalty: float = attrs.field(default=0.5, validator=attrs.validators.gt(0.0))


def _timed(v: Verdict) -> bool:
    return v.correct and v.speedup is not None and math.isfinite(v.speedup) and v.speedup > 0


def _speed_terms(group: list[Verdict], config: CAGRPOConfig) -> list[float]:
    """Each sample's speed term in [0, 1]; 0 for samples that are not correct or not timed."""
    if config.speed == "log":
        c = config.speed_clip
        return [(max(-c, min(c, math.log2(v.speedup))) + c) / (2 * c) if _timed(v) else 0.0 for v in group]
    timed = sorted({v.speedup for v in group if _timed(v)})
    if len(timed) < 2:
        return [0.0] * len(group)
    rank = {s: i / (len(timed) - 1) for i, s in enumerate(timed)}
    return [rank[v.speedup] if _timed(v) else 0.0 for v in group]


def group_rewards(group: list[Verdict], config: CAGRPOConfig) -> tuple[list[float], float, bool]:
    """Rewards for one complete group, its correctness rate, and whether the speed term was on."""
    rho = sum(v.correct for v in group) / len(group)
    speed_on = rho >= config.tau
    terms = _speed_terms(group, config) if speed_on else [0.0] * len(group)
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
