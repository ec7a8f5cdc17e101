"""Scores over results: unbiased pass@k, fast_p@k, geometric-mean speedup, grouped by level. Pure functions.

fast_p counts a result as faster than p only when its speedup clears p by its noise margin
(`EvalResult.speedup_margin`: the speedup's measured spread, at least ``SPEEDUP_MARGIN_FLOOR``), so a kernel at
parity (1.001x) is not fast_1; ``FAST_P_RULE`` says so under the score table."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from kzcore.types import SPEEDUP_MARGIN_FLOOR, EvalResult, speedup_noise_margin

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
FAST_P_RULE = (
    f"fast_p: correct and speedup > p x (1 + margin), margin = the speedup's spread "
    f"sqrt(ref_spread^2 + cand_spread^2) (IQR/median of the timed samples), at least {SPEEDUP_MARGIN_FLOOR:.0%}; "
    "each result's margin is its speedup_margin"
)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator 1 - C(n-c, k) / C(n, k) of P(at least one of k samples passes)."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        raise ValueError(f"k={k} exceeds the {n} samples drawn")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def geomean(values: Iterable[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def speedup_margin(r: EvalResult) -> float:
    """The relative margin ``r``'s speedup must clear to count as faster: the one recorded with it, else the
    one its spreads give."""
    if r.speedup_margin is not None:
        return r.speedup_margin
    return speedup_noise_margin(r.ref_spread, r.cand_spread)


def is_faster(r: EvalResult, p: float) -> bool:
    """fast_p's test: ``r`` is correct and, for p > 0, its speedup is above p x (1 + its noise margin)."""
    if not r.correct:
        return False
    if p == 0.0:
        return True
    return r.speedup is not None and r.speedup > p * (1.0 + speedup_margin(r))


def degenerate_problems(results: Iterable[EvalResult]) -> dict[tuple[int, str], str]:
    """(level, name) → reason, for every problem some result marks as failing the problem check."""
    return {(r.level, r.problem): r.problem_degenerate for r in results if r.problem_degenerate}


def degenerate_note(results: Iterable[EvalResult], include_degenerate: bool = False) -> str:
    """One line for the score table on the problems that failed the problem check ("" when none did)."""
    flagged = degenerate_problems(results)
    if not flagged:
        return ""
    names = ", ".join(f"level{lvl}/{name}" for lvl, name in sorted(flagged)[:8]) + (", …" if len(flagged) > 8 else "")
    if include_degenerate:
        return f"{len(flagged)} problem(s) failed the problem check and are counted (--include-degenerate): {names}"
    return (
        f"{len(flagged)} problem(s) failed the problem check (degenerate output) and are left out of the scores "
        f"(--include-degenerate counts them): {names}"
    )


def summarize(
    results: list[EvalResult],
    k: int = 1,
    problems: Iterable[tuple[int, str]] = (),
    include_degenerate: bool = False,
) -> dict:
    """Per level (and "all"): problems, samples, correct, pass@k, fast_p@k for p in FAST_P, geomean speedup,
    and ``excluded_degenerate``, the problems left out.

    ``problems`` lists (level, name) pairs that count even with no result (they score 0), as KernelBench's
    fast_p divides by all problems. fast_p for p > 0 is None when no correct result was timed. A problem
    that failed kz eval's problem check (its results carry ``problem_degenerate``) is left out of every
    figure, numerator and denominator, unless ``include_degenerate``: a kernel that writes zeros can be
    right on it.
    """
    excluded = set() if include_degenerate else set(degenerate_problems(results))
    groups: dict[tuple[int, str], list[EvalResult]] = defaultdict(list)
    for r in results:
        groups[(r.level, r.problem)].append(r)
    for key in problems:
        groups.setdefault(key, [])
    levels = sorted({lvl for lvl, _ in groups})
    table = {}
    for level in [*levels, "all"]:
        keys = [key for key in groups if level == "all" or key[0] == level]
        table[level] = _summarize_group([groups[key] for key in keys if key not in excluded], k)
        table[level]["excluded_degenerate"] = sum(key in excluded for key in keys)
    return table


def _summarize_group(per_problem: list[list[EvalResult]], k: int) -> dict:
    n_problems = len(per_problem)
    timed = any(r.correct and r.speedup is not None for rs in per_problem for r in rs)
    row = {
        "problems": n_problems,
        "samples": sum(len(rs) for rs in per_problem),
        "correct": sum(r.correct for rs in per_problem for r in rs),
        "k": k,
    }

    def mean_over_problems(ok) -> float:
        total = 0.0
        for rs in per_problem:
            if 0 < len(rs) < k:
                raise ValueError(f"pass@{k} needs >= {k} samples per problem; {rs[0].problem} has {len(rs)}")
            if rs:
                total += pass_at_k(len(rs), sum(ok(r) for r in rs), k)
        return total / n_problems if n_problems else 0.0

    row["pass@k"] = mean_over_problems(lambda r: r.correct)
    for p in FAST_P:
        row[f"fast_{p:g}"] = mean_over_problems(lambda r, p=p: is_faster(r, p)) if (p == 0.0 or timed) else None
    row["geomean_speedup"] = geomean(r.speedup for rs in per_problem for r in rs if r.correct and r.speedup)
    return row
