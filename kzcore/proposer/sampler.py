"""Sampling the API sets the Proposer is asked to combine, weighted by the task pool's history: APIs of tasks
the Coder failed are drawn more often, and the API sets of failed tasks are sometimes proposed again (the
KernelZero feedback from Coder to Proposer). Pure functions of the catalog, the history and a seeded RNG."""

from __future__ import annotations

import ast
import random
from collections.abc import Mapping, Sequence

import attrs

from kzcore.errors import KzError
from kzcore.proposer.catalog import Catalog
from kzcore.proposer.gates import GATE_ORDER, GateResult, apis_used
from kzcore.proposer.pool import PassRate, TaskRecord
from kzcore.types import Problem


class SamplerError(KzError):
    pass


@attrs.frozen
class SamplerConfig:
    """``min_size``..``max_size``: how many APIs one set holds (inclusive, uniform). ``failure_boost``: an
    API's weight is ``1 + failure_boost * failure(api)`` (see api_weights). ``replay_prob``: the chance that a
    set is the API set of a failed task (when there is one), extended by one API half of the time.
    ``fail_threshold``: a task counts as failed when its latest pass rate is at most this.
    ``exclusive_groups``: groups that contribute at most one API to a set (a module has one loss).
    ``unseen_weight``: a curriculum: the weight of an API that neither ``known_apis`` (e.g. those the Proposer's
    examples and cold start use) nor any accepted task uses is multiplied by this; 1 (default) draws every API
    alike. Below 1 the Proposer starts on APIs it has seen and the draw widens as modules using others pass."""

    min_size: int = 1
    max_size: int = 4
    failure_boost: float = 2.0
    replay_prob: float = 0.25
    fail_threshold: float = 0.25
    exclusive_groups: tuple[str, ...] = ("loss",)
    known_apis: frozenset[str] = attrs.field(factory=frozenset, converter=frozenset)
    unseen_weight: float = 1.0

    def __attrs_post_init__(self):
        if not 1 <= self.min_size <= self.max_size:
            raise SamplerError(f"API set size range {self.min_size}..{self.max_size}: need 1 <= min <= max")
        if self.failure_boost < 0:
            raise SamplerError(f"failure_boost must be >= 0, got {self.failure_boost}")
        if not 0.0 <= self.replay_prob <= 1.0:
            raise SamplerError(f"replay_prob must lie in [0, 1], got {self.replay_prob}")
        if not 0.0 < self.unseen_weight <= 1.0:
            raise SamplerError(f"unseen_weight must lie in (0, 1], got {self.unseen_weight}")


def coder_failure(record: TaskRecord) -> float | None:
    """1 - the latest pass rate of an accepted task the Coder has attempted; None otherwise (a module that
    failed a gate is the Proposer's failure, not the Coder's)."""
    p = record.latest_pass_rate
    if not record.accepted or p is None:
        return None
    return 1.0 - p


def api_weights(catalog: Catalog, history: Sequence[TaskRecord], failure_boost: float = 2.0) -> dict[str, float]:
    """``w(api) = 1 + failure_boost * F(api)`` with ``F(api) = sum of (1 - p) over attempted tasks using api,
    divided by (their count + 1)``. The +1 is a prior of one solved task: one failure lifts an API halfway,
    many failures toward the full boost. APIs without history keep weight 1."""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for record in history:
        failure = coder_failure(record)
        if failure is None:
            continue
        for name in set(record.apis):
            total[name] = total.get(name, 0.0) + failure
            count[name] = count.get(name, 0) + 1
    return {
        api.name: 1.0 + failure_boost * total.get(api.name, 0.0) / (count.get(api.name, 0) + 1) for api in catalog.apis
    }


def task_api_set(problem: Problem, catalog: Catalog) -> tuple[str, ...]:
    """The catalog APIs a task's reference source uses, found as the AST gate finds them (catalog order; none
    when the source does not parse)."""
    try:
        return apis_used(ast.parse(problem.source), catalog)
    except (SyntaxError, ValueError, RecursionError):
        return ()


def coder_task_records(
    problems: Sequence[Problem], results: Mapping[str, tuple[int, int, int]], catalog: Catalog
) -> list[TaskRecord]:
    """History rows for the Coder's tasks that are not pool modules (built-in, cold-start, variant and composed
    problems): each with its API set (`task_api_set`) and its latest result ``results["level/name"] = (round,
    passed, k)``, as an accepted task, so that the Coder's failures on it raise its APIs' weights and replay its
    API set as a pool task's would. Tasks without a result or without a catalog API make no row; the rows are
    never written to the pool."""
    rows = []
    for problem in problems:
        result = results.get(f"{problem.level}/{problem.name}")
        apis = task_api_set(problem, catalog)
        if result is None or not apis:
            continue
        round_, passed, k = result
        rows.append(
            TaskRecord(
                id=f"task:{problem.level}/{problem.name}",
                apis=apis,
                level=problem.level,
                code=problem.source,
                gates={gate: GateResult(True) for gate in GATE_ORDER},
                pass_rates=(PassRate(round_, k, passed),),
                provenance={"source": "coder task"},
                apis_used=apis,
            )
        )
    return rows


def failed_api_sets(history: Sequence[TaskRecord], fail_threshold: float = 0.25) -> list[tuple[tuple[str, ...], float]]:
    """(API set, 1 - p) of each attempted task whose latest pass rate is at most ``fail_threshold``."""
    out = []
    for record in history:
        failure = coder_failure(record)
        if failure is not None and 1.0 - failure <= fail_threshold:
            out.append((tuple(record.apis), failure))
    return out


def _draw(
    catalog: Catalog,
    rng: random.Random,
    weights: dict[str, float],
    size: int,
    chosen: list[str],
    exclusive: tuple[str, ...],
) -> list[str]:
    """Add weighted draws without replacement to ``chosen`` until it holds ``size`` APIs (or none are left)."""
    chosen = list(chosen)
    while len(chosen) < size:
        taken_groups = {catalog.get(n).group for n in chosen}
        pool = [
            a.name
            for a in catalog.apis
            if a.name not in chosen and not (a.group in exclusive and a.group in taken_groups)
        ]
        if not pool:
            break
        chosen.append(rng.choices(pool, weights=[weights[n] for n in pool])[0])
    return chosen


def sample_api_sets(
    catalog: Catalog,
    n: int,
    history: Sequence[TaskRecord] = (),
    config: SamplerConfig = SamplerConfig(),
    rng: random.Random | int | None = None,
) -> list[tuple[str, ...]]:
    """``n`` API sets (names in catalog order), weighted by ``history`` as configured."""
    rng = rng if isinstance(rng, random.Random) else random.Random(rng)
    weights = api_weights(catalog, history, config.failure_boost)
    if config.unseen_weight != 1.0:
        seen = config.known_apis | {name for record in history if record.accepted for name in record.apis}
        weights = {name: w if name in seen else w * config.unseen_weight for name, w in weights.items()}
    known = set(catalog.names)
    failed = [(tuple(a for a in apis if a in known), f) for apis, f in failed_api_sets(history, config.fail_threshold)]
    failed = [(apis, f) for apis, f in failed if apis and f > 0]
    order = {name: i for i, name in enumerate(catalog.names)}
    sets = []
    for _ in range(n):
        if failed and rng.random() < config.replay_prob:
            base = list(rng.choices([a for a, _ in failed], weights=[f for _, f in failed])[0])
            grow = len(base) < config.max_size and rng.random() < 0.5
            chosen = _draw(catalog, rng, weights, len(base) + grow, base, config.exclusive_groups)
        else:
            size = rng.randint(config.min_size, min(config.max_size, len(catalog.apis)))
            chosen = _draw(catalog, rng, weights, size, [], config.exclusive_groups)
        sets.append(tuple(sorted(chosen, key=order.__getitem__)))
    return sets
