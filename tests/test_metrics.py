"""Scores: unbiased pass@k, fast_p (correct AND speedup > p, over all problems), geomean, per-level tables."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kzcore.metrics import FAST_P, FAST_P_RULE, geomean, is_faster, pass_at_k, summarize
from kzcore.types import SPEEDUP_MARGIN_FLOOR, EvalResult, Status


def result(
    problem: str, status: Status = Status.CORRECT, speedup: float | None = None, level: int = 1, sample: int = 0
):
    return EvalResult(problem=problem, level=level, language="triton", sample=sample, status=status, speedup=speedup)


def stable_pass_at_k(n: int, c: int, k: int) -> float:
    """The Codex paper's numerically stable product form, an independent formula for the same estimator."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


# ----------------------------------------------------------------------------------------------------
# pass@k
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("c", range(6))
@pytest.mark.parametrize("k", range(1, 6))
def test_pass_at_k_matches_closed_form(c, k):
    expected = 1.0 - math.comb(5 - c, k) / math.comb(5, k)
    assert pass_at_k(5, c, k) == pytest.approx(expected, abs=1e-12)
    assert pass_at_k(5, c, k) == pytest.approx(stable_pass_at_k(5, c, k), abs=1e-12)


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 1, 1, 0.2),
        (10, 3, 1, 0.3),
        (10, 3, 2, 1 - 21 / 45),  # 1 - C(7,2)/C(10,2) = 8/15
        (4, 2, 2, 5 / 6),
        (5, 0, 3, 0.0),
        (5, 5, 1, 1.0),
        (5, 2, 4, 1.0),  # fewer failures than k: every draw of 4 holds a pass
        (100, 1, 10, 0.1),
    ],
)
def test_pass_at_k_pinned_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n, c, k", [(5, 6, 1), (5, -1, 1), (5, 1, 0), (5, 1, 6)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
@settings(suppress_health_check=[HealthCheck.too_slow])  # a loaded 2-core machine draws slowly; the draws are tiny
def test_pass_at_k_is_a_monotone_probability(args):
    n, c, k = args
    value = pass_at_k(n, c, k)
    assert 0.0 <= value <= 1.0
    if c < n:
        assert pass_at_k(n, c + 1, k) >= value - 1e-12
    if k < n:
        assert pass_at_k(n, c, k + 1) >= value - 1e-12
    assert value == pytest.approx(stable_pass_at_k(n, c, k), abs=1e-9)


# ----------------------------------------------------------------------------------------------------
# fast_p and geomean
# ----------------------------------------------------------------------------------------------------


def test_fast_p_counts_correct_and_strictly_faster():
    results = [
        result("a", speedup=1.2),
        result("b", speedup=0.7),
        result("c", speedup=1.0),  # exactly 1.0 is not faster than 1.0
        result("d", Status.INCORRECT, speedup=3.0),  # fast but wrong counts for nothing
        result("e", Status.HACK_SUSPECTED, speedup=9.0),
    ]
    row = summarize(results)["all"]
    assert row["problems"] == 5 and row["correct"] == 3
    assert row["pass@k"] == pytest.approx(3 / 5)
    assert row["fast_0"] == pytest.approx(3 / 5)
    assert row["fast_0.5"] == pytest.approx(3 / 5)
    assert row["fast_0.8"] == pytest.approx(2 / 5)
    assert row["fast_1"] == pytest.approx(1 / 5)
    assert row["fast_1.5"] == 0.0
    assert row["fast_2"] == 0.0
    assert row["geomean_speedup"] == pytest.approx((1.2 * 0.7 * 1.0) ** (1 / 3))
    assert {f"fast_{p:g}" for p in FAST_P} <= set(row)


def timed(problem: str, speedup: float, spread: float) -> EvalResult:
    """A correct, timed result whose reference and candidate timings both have relative spread ``spread``."""
    return EvalResult(
        problem=problem, level=1, language="triton", sample=0, status=Status.CORRECT, speedup=speedup,
        ref_spread=spread, cand_spread=spread,
    )  # fmt: skip


def test_parity_is_not_faster_however_quiet_the_timings_a_clear_win_is():
    parity, win = timed("a", 1.001, 0.005), timed("b", 1.2, 0.005)
    # a 0.5 % spread on each side is 0.71 % on their ratio, under the floor: the floor is the margin
    assert parity.speedup_margin == win.speedup_margin == SPEEDUP_MARGIN_FLOOR == 0.01
    assert not is_faster(parity, 1.0) and is_faster(win, 1.0)
    row = summarize([parity, win])["all"]
    assert row["fast_1"] == pytest.approx(1 / 2) and row["fast_0.8"] == pytest.approx(1.0)


def test_the_margin_is_the_speedups_measured_spread_when_above_the_floor():
    noisy = timed("a", 1.05, 0.04)
    assert noisy.speedup_margin == pytest.approx(0.04 * math.sqrt(2))  # spreads of a ratio add in quadrature
    assert not is_faster(noisy, 1.0) and is_faster(noisy, 0.8)  # 1.05 < 1.0566; 1.05 > 0.8 x 1.0566
    assert is_faster(timed("b", 1.06, 0.04), 1.0)
    assert summarize([noisy])["all"]["fast_1"] == 0.0


def test_the_margin_is_in_every_results_row_and_old_rows_get_it_from_their_spreads(tmp_path):
    from kzcore.results import ResultsWriter, read_results
    from kzcore.types import to_json

    assert result("untimed").speedup_margin is None
    out = tmp_path / "r.jsonl"
    writer = ResultsWriter(out)
    writer.write(timed("a", 1.2, 0.03))
    writer.close()
    (row,) = [json.loads(line) for line in out.read_text().splitlines() if '"problem"' in line]
    assert row["speedup_margin"] == pytest.approx(0.03 * math.sqrt(2))
    old = {"type": "result", **to_json(timed("b", 1.02, 0.002))}
    del old["speedup_margin"]
    out.write_text(out.read_text() + json.dumps(old) + "\n")  # a row written before the field existed
    by = {r.problem: r for r in read_results(out)}
    assert by["a"].speedup_margin == pytest.approx(0.03 * math.sqrt(2))
    assert by["b"].speedup_margin == SPEEDUP_MARGIN_FLOOR and is_faster(by["b"], 1.0)


def test_distillation_keeps_as_faster_only_what_fast_1_counts():
    from kzcore.train.distill import keep

    assert keep(timed("a", 1.2, 0.005), only_faster=True)
    assert not keep(timed("b", 1.001, 0.005), only_faster=True) and keep(timed("b", 1.001, 0.005), only_faster=False)


def test_the_score_table_says_which_fast_p_rule_it_used():
    from io import StringIO

    from rich.console import Console

    from kzcore.report import score_table

    console = Console(file=StringIO(), width=400)
    console.print(score_table([timed("a", 1.2, 0.005)]))
    text = " ".join(console.file.getvalue().split())
    assert FAST_P_RULE in text and "at least 1%" in text


def test_fast_0_is_the_correct_rate_and_other_fast_p_are_none_when_untimed():
    results = [result("a"), result("b"), result("c", Status.COMPILE_ERROR), result("d", Status.TIMEOUT)]
    row = summarize(results)["all"]
    assert row["fast_0"] == pytest.approx(0.5) == row["pass@k"]
    for p in FAST_P[1:]:
        assert row[f"fast_{p:g}"] is None
    assert row["geomean_speedup"] is None


def test_geomean():
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean([2.0, 8.0, 0.5]) == pytest.approx(2.0)
    assert geomean([2.0, 3.0]) == pytest.approx(6.0**0.5)
    assert geomean([3.0, None, 0.0, -1.0]) == pytest.approx(3.0)  # only positive figures count
    assert geomean([]) is None
    assert geomean([None]) is None


# ----------------------------------------------------------------------------------------------------
# grouping
# ----------------------------------------------------------------------------------------------------


def test_per_level_grouping():
    results = [
        result("a", level=1, speedup=2.0),
        result("b", Status.INCORRECT, level=1),
        result("x", level=2, speedup=0.5),
    ]
    table = summarize(results)
    assert list(table) == [1, 2, "all"]
    assert (table[1]["problems"], table[1]["correct"], table[1]["pass@k"]) == (2, 1, 0.5)
    assert (table[2]["problems"], table[2]["correct"], table[2]["pass@k"]) == (1, 1, 1.0)
    assert table[1]["fast_1"] == 0.5 and table[2]["fast_1"] == 0.0
    assert table[2]["geomean_speedup"] == pytest.approx(0.5)
    assert table["all"]["problems"] == 3 and table["all"]["pass@k"] == pytest.approx(2 / 3)
    assert table["all"]["geomean_speedup"] == pytest.approx(1.0)


def test_same_name_on_two_levels_is_two_problems():
    table = summarize([result("1_X", level=1), result("1_X", Status.INCORRECT, level=2)])
    assert table["all"]["problems"] == 2 and table["all"]["pass@k"] == 0.5


def test_problems_without_results_score_zero():
    results = [result("a", speedup=2.0)]
    problems = [(1, "a"), (1, "b"), (1, "c"), (2, "z")]
    table = summarize(results, problems=problems)
    assert table["all"]["problems"] == 4
    assert table["all"]["samples"] == 1
    assert table["all"]["pass@k"] == pytest.approx(1 / 4)
    assert table["all"]["fast_1"] == pytest.approx(1 / 4)
    assert table[1]["pass@k"] == pytest.approx(1 / 3)
    assert table[2]["problems"] == 1 and table[2]["pass@k"] == 0.0


def test_pass_at_k_over_samples_per_problem():
    results = [result("a", sample=0), result("a", Status.INCORRECT, sample=1), result("a", Status.INCORRECT, sample=2)]
    results += [result("b", Status.INCORRECT, sample=i) for i in range(3)]
    assert summarize(results, k=1)["all"]["pass@k"] == pytest.approx((1 / 3 + 0) / 2)
    assert summarize(results, k=2)["all"]["pass@k"] == pytest.approx((pass_at_k(3, 1, 2) + 0) / 2)
    assert summarize(results, k=2)["all"]["k"] == 2
    with pytest.raises(ValueError, match="pass@4 needs >= 4 samples per problem"):
        summarize(results, k=4)
