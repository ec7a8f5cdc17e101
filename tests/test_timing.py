"""The timing loop's early stop (kzcore.builtins.timing.interleaved), driven by a fake timer on the CPU, and the
launch cover's rule (LaunchCover: when a sample holds host time, how the wait in front of it grows)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kzcore.builtins.timing import (
    COVER_RAISES,
    HOST_MARGIN_US,
    MAX_COVER_US,
    RETAKE_BUDGET,
    LaunchCover,
    confirm_spill,
    interleaved,
    median_rel_error,
    settle,
    settle_note,
)
from kzcore.errors import TimedCheckFailed
from kzcore.timed import TimedRounds
from kzcore.types import EvalConfig


def fake_timer(noise: float, seed: int = 0):
    """A ``pair(reference_first, last)`` as `interleaved` takes it, from two callables' fixed times and noise;
    ``calls`` records the callables in order, and ``lasts`` the pairs flagged last."""
    rng = random.Random(seed)
    calls, lasts = [], []

    def timed(fn) -> float:
        calls.append(fn)
        return fn() * (1 + rng.uniform(-noise, noise))

    def pair(reference_first: bool, last: bool) -> tuple[float, float]:
        lasts.append(last)
        if reference_first:
            r = timed(ref)
            return r, timed(cand)
        c = timed(cand)
        return timed(ref), c

    pair.calls, pair.lasts = calls, lasts
    return pair, calls


def ref():
    return 2.0


def cand():
    return 1.0


def test_steady_timings_stop_at_the_minimum_with_a_note():
    timed, calls = fake_timer(noise=0.001)
    ref_ms, cand_ms, note = interleaved(timed, 100, EvalConfig(min_reps=30, timing_precision=0.004))
    assert len(ref_ms) == len(cand_ms) == 32  # the first look at the stop rule past 30: every 8 pairs
    assert note == "stopped at 32 reps: medians within 0.4%"
    # the candidate first in every pair (nothing of the pair's reference exists while it runs)
    assert calls[:4] == [cand, ref, cand, ref]
    # the last pair, and only it, is flagged last (the rounds always check it)
    assert timed.lasts == [False] * 31 + [True]
    timed, _ = fake_timer(noise=0.001)
    assert len(interleaved(timed, 100, EvalConfig())[0]) == EvalConfig().min_reps == 16  # the default
    timed, calls = fake_timer(noise=0.001)  # or alternating: the reference first on even pairs
    interleaved(timed, 100, EvalConfig(min_reps=30, timing_precision=0.004, timed_order="alternate"))
    assert calls[:4] == [ref, cand, cand, ref]


def test_noisy_timings_run_every_rep():
    timed, _ = fake_timer(noise=0.5)
    ref_ms, cand_ms, note = interleaved(timed, 100, EvalConfig(min_reps=30, timing_precision=0.004))
    assert len(ref_ms) == 100 and note == ""
    assert median_rel_error(ref_ms) > 0.004


def test_precision_zero_always_runs_all_reps():
    timed, _ = fake_timer(noise=0.0)
    ref_ms, _, note = interleaved(timed, 100, EvalConfig(timing_precision=0.0))
    assert len(ref_ms) == 100 and note == ""


def test_fewer_reps_than_the_minimum_are_all_run():
    timed, _ = fake_timer(noise=0.0)
    ref_ms, _, _ = interleaved(timed, 12, EvalConfig(min_reps=30))
    assert len(ref_ms) == 12


def test_median_rel_error_shrinks_with_more_samples_and_is_infinite_for_few():
    rng = random.Random(1)
    few = [1 + rng.gauss(0, 0.01) for _ in range(20)]
    many = few + [1 + rng.gauss(0, 0.01) for _ in range(380)]
    assert median_rel_error(many) < median_rel_error(few)
    assert median_rel_error([1.0, 2.0]) == float("inf")


def test_a_call_queued_before_the_gpu_reached_the_start_event_is_covered():
    cover = LaunchCover(100.0)
    flush_us, wait_us = 75.0, 100.0
    assert cover.covered(60.0, flush_us + wait_us)  # a torch op: queued long before the wait ends
    assert cover.covered(175.0 - HOST_MARGIN_US, flush_us + wait_us)
    assert not cover.covered(175.0 - HOST_MARGIN_US + 1, flush_us + wait_us)  # its launch would be timed
    assert cover.host_max_us == 175.0 - HOST_MARGIN_US + 1 and cover.summary("candidate") == ""


def test_an_uncovered_call_raises_the_wait_enough_to_cover_it_with_the_clock_corrected():
    cover = LaunchCover(100.0)
    # the host took 400 us to queue; the GPU waited only 25 us of the 100 asked (cycles calibrated at a low clock)
    assert not cover.covered(400.0, 75.0 + 25.0)
    assert cover.raise_for(400.0, flush_us=75.0, wait_us=25.0)
    needed_on_gpu = 400.0 + HOST_MARGIN_US - 75.0
    got_on_gpu = cover.requested_us * 25.0 / 100.0  # what the raised request gives at the same clock
    assert got_on_gpu >= needed_on_gpu
    assert cover.covered(400.0, 75.0 + got_on_gpu)  # the same call, taken again, is covered
    assert "raised to" in cover.summary("candidate") and "400 us" in cover.summary("candidate")


def test_a_forward_that_waits_on_the_gpu_stops_raising_and_is_counted():
    """A forward that synchronizes takes the host as long as the GPU's whole wait, however long: the cover is
    raised a few times, then samples are kept as measured and the note says so."""
    cover = LaunchCover(100.0)
    raised = 0
    for _ in range(10):
        wait = cover.requested_us
        host = 75.0 + wait + 30.0  # the host waits for the flush, the wait and the kernel
        if cover.covered(host, 75.0 + wait):
            break
        if not cover.raise_for(host, 75.0, wait):
            cover.uncovered += 1
            continue
        raised += 1
    assert raised == COVER_RAISES and cover.uncovered == 10 - COVER_RAISES
    assert cover.requested_us <= MAX_COVER_US
    assert "hold host time" in cover.summary("candidate")


def test_a_cover_turned_off_keeps_every_sample_as_measured():
    cover = LaunchCover(0.0)  # --launch-cover-us 0
    assert cover.covered(500.0, 75.0) and cover.summary("reference") == ""


def test_the_cover_never_grows_past_its_cap():
    cover = LaunchCover(100.0)
    assert cover.raise_for(10 * MAX_COVER_US, 75.0, 100.0) and cover.requested_us == MAX_COVER_US
    assert not cover.raise_for(10 * MAX_COVER_US, 75.0, MAX_COVER_US)


def _timed_call(cover: LaunchCover, host_of, flush_us: float = 75.0, clock: float = 1.0) -> bool:
    """One timed call as `time_cuda` runs it against ``cover``: ``host_of(wait_us)`` is the host's queueing time
    for a call behind that GPU wait; ``clock`` the GPU wait got per us asked. True if the kept sample is covered."""
    while True:
        wait = cover.requested_us * clock
        host = host_of(wait)
        if cover.covered(host, flush_us + wait):
            cover.kept(host, flush_us, wait)
            return True
        if cover.raise_for(host, flush_us, wait):
            cover.retaken += 1
            continue
        cover.uncovered += 1
        cover.kept(host, flush_us, wait)
        return False


def test_a_lone_slow_queueing_is_taken_again_and_leaves_no_longer_wait_behind():
    cover = LaunchCover(100.0, window=16)
    assert all(_timed_call(cover, lambda w: 60.0) for _ in range(5)) and cover.requested_us == 100.0
    assert _timed_call(cover, lambda w: 900.0)  # a page fault while queueing: retaken behind a longer wait
    assert cover.retaken == 1 and cover.peak_us >= 900.0 + HOST_MARGIN_US - 75.0
    assert _timed_call(cover, lambda w: 60.0)
    assert cover.requested_us == 100.0  # the one slow queueing is not what the next calls wait for
    assert "raised to" in cover.summary("candidate") and "1 sample(s) taken again" in cover.summary("candidate")
    grow_only = LaunchCover(100.0)  # window 0: the old rule, the wait stays raised for the rest of the timing
    for host in (60.0, 900.0, 60.0):
        _timed_call(grow_only, lambda w, h=host: h)
    assert grow_only.requested_us >= 900.0 + HOST_MARGIN_US - 75.0


def test_a_host_that_stays_slow_keeps_its_longer_wait_without_retaking_every_call():
    cover = LaunchCover(100.0, window=16)
    for _ in range(20):
        assert _timed_call(cover, lambda w: 400.0, clock=0.5)  # the cycles calibrated at twice today's clock
    assert cover.retaken <= 2 and cover.uncovered == 0
    assert cover.requested_us * 0.5 >= 400.0 + HOST_MARGIN_US - 75.0  # what the GPU waits covers the host


def test_a_forward_that_waits_on_the_gpu_gets_the_first_wait_back_once_no_raise_covers_it():
    cover = LaunchCover(100.0, window=16)
    kept = [_timed_call(cover, lambda w: 75.0 + w + 30.0) for _ in range(30)]
    assert not any(kept) and cover.raises == COVER_RAISES and cover.uncovered == 30  # 4 retakes, not 4 a call
    assert cover.hopeless and cover.requested_us == 100.0
    assert "hold host time" in cover.summary("candidate")


def test_slow_queueings_past_the_retake_budget_keep_the_longest_wait_not_the_first():
    """A host whose queueing keeps jumping past the recent ones (a loaded host: 70 of a multi-kernel torch
    reference's samples held host time in a ground-truth run when the wait fell back to the first): once the
    retake budget is spent, the wait stays at the longest asked, which covers them."""
    cover = LaunchCover(100.0, window=16)
    calls = ([60.0] * 16 + [800.0]) * RETAKE_BUDGET  # each slow one alone in its window: taken again
    assert all(_timed_call(cover, lambda w, h=h: h) for h in calls)
    assert cover.raises == cover.retaken == RETAKE_BUDGET
    assert cover.requested_us == cover.peak_us >= 800.0 + HOST_MARGIN_US - 75.0
    assert all(_timed_call(cover, lambda w, h=h: h) for h in [60.0, 800.0] * 8)
    assert cover.uncovered == 0 and cover.retaken == RETAKE_BUDGET  # covered from now on, none taken again


def _flushes(values, sleep_s=0.0):
    """A stand-in for one timed L2 flush: the next of ``values`` (us), the last one repeated."""
    import time

    values = list(values)

    def flush_us():
        if sleep_s:
            time.sleep(sleep_s)
        return values.pop(0) if len(values) > 1 else values[0]

    return flush_us


def test_settle_waits_until_the_flush_takes_its_quiet_time_again(monkeypatch):
    """Before timing, the L2 flush (a fixed memory-bound workload) runs until two readings in a row (medians of
    5 flushes) are within 5 % of the quickest reading the process has seen: a falling sequence (the GPU's
    memory getting quieter) is not yet quiet; a flush slower than one seen before (another process's memory
    traffic) waits; one fast outlier neither moves the quiet level nor holds the wait; quiet at once, no note;
    the budget ends a wait that would not end, and the note says so."""
    from kzcore.builtins import timing

    monkeypatch.setattr(timing, "_quiet_flush_us", {})
    waited, flushes, slowest, quickest = settle(_flushes([90, 88, 85, 80, 78, 76, 75, 75.5, 75.2, 75, 75.1]), 1e3)
    # readings 85, 80, 78, 76, 75.5, 75.2, 75.1, 75.1: quiet once this one and the one 5 flushes before
    # (78) are within 5 % of 75.1
    assert (flushes, slowest, quickest) == (12, 90, 75.1)
    assert "waited" in settle_note(waited, flushes, slowest, quickest, 1e3)

    # the next placement: the quiet level (75.1 us) is remembered, so a flat 82 us is not quiet
    waited, flushes, slowest, quickest = settle(_flushes([82] * 7 + [76, 75.4, 75.1, 75.3, 75.2]), 1e3)
    assert (flushes, slowest, quickest) == (15, 82, 75.1)
    assert settle(_flushes([75.5]), 1e3)[1] == 10  # two readings: the fewest flushes
    assert settle_note(*settle(_flushes([75.5]), 1e3), 1e3) == ""
    assert settle(_flushes([58] + [75.5] * 20), 1e3)[1:] == (10, 75.5, 75.1)  # an outlier is one flush of five

    waited, flushes, *_ = settle(_flushes([82], sleep_s=0.002), 30.0)
    assert 30.0 <= waited < 200 and flushes < 20
    note = settle_note(waited, flushes, 82, 75.1, 30.0)
    assert "still busy" in note and "82 us" in note and "75 us" in note
    assert timing._quiet_flush_us == {0: 75.1}


def test_timing_runs_with_the_instrumentation_off_the_launch_path(tmp_path):
    """The Triton plugin's LaunchCounter: bare() puts each kernel's own run back (no counting wrapper on the
    timed path) and re-instruments afterwards; a plain callable from a plugin becomes a LaunchCounter."""
    from kz_triton.runtime import instrument
    from kzcore.problems import import_module_from_file
    from kzcore.types import LaunchCounter, as_launch_counter

    path = tmp_path / "cand_relu.py"
    path.write_text((Path(__file__).parent / "legit" / "two_kernels.py").read_text())
    module = import_module_from_file(path, "cand_relu")
    kernels = [v for v in vars(module).values() if hasattr(v, "run") and hasattr(v, "fn")]
    assert kernels
    before = [k.run for k in kernels]
    counter = instrument(module)
    assert isinstance(counter, LaunchCounter)
    wrapped = [k.run for k in kernels]
    assert all(w is not b for w, b in zip(wrapped, before, strict=True))
    with counter.bare():
        assert [k.run for k in kernels] == before
    assert [k.run for k in kernels] == wrapped
    plain = as_launch_counter(lambda: 3)
    assert plain() == 3 and as_launch_counter(None) is None
    with plain.bare():  # nothing to take off: a plain count keeps counting
        assert plain() == 3


def test_ground_truth_bench_smoke_on_cpu(tmp_path, own_workers):
    """bench/timing.py --ground-truth end to end on the CPU (interpreter, wall clocks): the record has, per
    kernel, the in-process measurement, the pool's speedups with 1 and 4 workers per GPU, the in-process
    times on separate allocations of the inputs and the times in fresh processes."""
    import json
    import subprocess
    import sys

    out = tmp_path / "gt.json"
    cmd = [sys.executable, "bench/timing.py", "--device", "cpu", "--ground-truth", "--gt-problems", "1_ReLU",
           "--gt-runs-1", "1", "--gt-runs-4", "2", "--gt-placements", "2", "--gt-processes", "2",
           "--gt-process-kernels", "1_ReLU@small,2_GELU@huge", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "not kernels of this run, skipped: 2_GELU@huge" in proc.stderr  # a label it cannot time is said
    report = json.loads(out.read_text())
    assert report["smoke"] is True and report["bench"] == "timing-ground-truth"
    assert report["partial"] is False  # complete: every phase written, the last write marks it so
    assert report["phases_done"] == ["direct", "placements", "processes", "pool_1w", "pool_4w", "self_reference"]
    assert [p.name for p in tmp_path.iterdir()] == ["gt.json"]  # the checkpoints' temporary files are gone
    (row,) = report["ground_truth"]["rows"]
    assert row["kernel"] == "1_ReLU@small" and row["do_bench"]["ref_ms"] > 0
    assert row["kz_1w"]["statuses"] == ["correct"] and len(row["kz_4w"]["speedups"]) == 2
    assert "vs_do_bench" in row["kz_4w"] and row["truth"] == "do_bench" and "vs_truth" in row["kz_4w"]
    # the same kernel on two allocations of its inputs in the bench process, each kept while the next is made
    placed = row["placements"]
    assert placed["count"] == 2 and len(placed["sets"]) == 2 and all(r["cand_ms"] > 0 for r in placed["sets"])
    assert len({r["address"] for r in placed["sets"]}) == 2 and placed["cand_cv"] is not None
    # and in two fresh processes, one after the other
    spread = row["processes"]
    assert spread["count"] == 2 and len({r["pid"] for r in spread["sets"]}) == 2
    assert all(r["ref_ms"] > 0 and r["cand_ms"] > 0 for r in spread["sets"]) and spread["cand_cv"] is not None


def test_the_truth_is_do_bench_unless_the_host_is_slower_than_the_gpu():
    """do_bench times the host once queueing a call takes longer than the GPU's flush and kernel: then the
    flushed graph replay is the truth (figures as measured on an H200 VM whose host took ~100 us to queue a Triton
    launch)."""
    sys.path.insert(0, str(Path(__file__).parent.parent))
    try:
        from bench.timing_truth import truth_for
    finally:
        sys.path.pop(0)
    graph = {"flushed_graph": {"ref_ms": 0.0375, "cand_ms": 0.0372, "speedup": 1.008}}
    slow_launch = {"iteration_host_us": {"ref": 30.0, "cand": 110.0}, "flush_us": 64.0, **graph}
    assert truth_for(slow_launch)["truth"] == "flushed_graph"
    quick = {"iteration_host_us": {"ref": 30.0, "cand": 40.0}, "flush_us": 64.0, **graph}
    assert truth_for(quick)["truth"] == "do_bench"
    # measured once, the host's time counts twice: 8_MeanReduction@mid on an H200, 84 us to queue against a
    # 66 us flush and a 42 us kernel, and do_bench read it 1.7x slow on two of its placements
    jittery = {"iteration_host_us": {"ref": 39.1, "cand": 84.3}, "flush_us": 66.1,
               "flushed_graph": {"ref_ms": 0.0504, "cand_ms": 0.0420, "speedup": 1.2}}  # fmt: skip
    assert truth_for(jittery)["truth"] == "flushed_graph"
    long_kernel = {**slow_launch, "flushed_graph": {"ref_ms": 0.5, "cand_ms": 0.5, "speedup": 1.0}}
    assert truth_for(long_kernel)["truth"] == "do_bench"  # the host queues the next call while this one runs
    assert truth_for({"do_bench": {"speedup": 1.0}})["truth"] == "do_bench"  # CPU smoke: nothing else measured


def test_a_recorded_report_is_judged_again_without_measuring(tmp_path):
    """bench/timing.py --rederive: the recorded measurements judged by today's truth rule; the verdicts
    change, the measurements do not."""
    row = {
        "kernel": "8_MeanReduction@mid",
        "size": "gt_mid",
        "do_bench": {"ref_ms": 0.0510, "cand_ms": 0.0546, "speedup": 0.933},
        "flushed_graph": {"ref_ms": 0.0504, "cand_ms": 0.0420, "speedup": 1.2},
        "cudagraph": {},
        "iteration_host_us": {"ref": 39.1, "cand": 84.3},
        "flush_us": 66.1,
        "truth": "do_bench",
        "kz_4w": {"speedup_median": 1.195, "speedup_cv": 0.011, "vs_truth": 1.281, "vs_do_bench": 1.281},
    }
    report = {"device": "NVIDIA H200", "total_s": 1.0, "self_reference": {"max_dev": 0.001, "ok": True},
              "ground_truth": {"rows": [row], "kernels": 1}}  # fmt: skip
    recorded = tmp_path / "truth.json"
    recorded.write_text(json.dumps(report))
    out = tmp_path / "again.json"
    cmd = [sys.executable, "bench/timing.py", "--rederive", str(recorded), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    again = json.loads(out.read_text())
    (judged,) = again["ground_truth"]["rows"]
    assert judged["truth"] == "flushed_graph" and judged["do_bench"] == row["do_bench"]
    assert judged["kz_4w"]["vs_truth"] == pytest.approx(1.195 / 1.2)
    assert again["summary"]["ok_vs_truth"] is True and "rederived" in again["summary"]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    proc = subprocess.run([*cmd[:3], str(bad)], cwd=Path(__file__).parent.parent, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "is not a ground-truth report" in proc.stderr


def test_slow_placements_counts_those_slow_on_both_sides_and_where_they_came():
    """The ground truth's count of placements slow on both sides (the GPU slow, not one side's pages): one
    at a job's start, one later; one side alone slow (22_MatVec's candidate on its pages) is not counted."""
    from bench.timing_truth import slow_placements

    job = [[1.05, 2.10], [1.0, 2.0], [1.0, 2.0], [1.0, 2.15], [1.03, 2.05], [1.0, 2.0]]
    assert slow_placements([[job], [[]]]) == {"placements_timed": 6, "slow_placements": 2, "slow_at_job_start": 1}
    assert slow_placements([]) == {"placements_timed": 0, "slow_placements": 0, "slow_at_job_start": 0}


def test_the_timing_bench_reports_the_timers_phases_per_problem():
    """bench/timing.py's repeat section: the median timing stage and timer phases over a problem's runs, and the
    median time per timed pair (the probe pair counted); nothing for results without phases (a CPU run)."""
    from types import SimpleNamespace

    from bench.timing import phase_medians

    def result(pairs_s, reps):
        stages = {"timing": pairs_s + 0.01, "timing.pairs": pairs_s, "timing.wait": pairs_s / 2, "check": 0.5}
        return SimpleNamespace(stages=stages, timing_reps=reps)

    out = phase_medians([result(0.10, 31), result(0.12, 31), result(0.30, 39)])
    assert out == {
        "timing": 0.13, "timing.pairs": 0.12, "timing.wait": 0.06, "pairs": 32, "per_pair_s": 0.00375,
    }  # fmt: skip
    assert phase_medians([SimpleNamespace(stages={"timing": 0.0}, timing_reps=0)]) == {}


def spilling_passes(passes: list[tuple[float, float, float]], rounds=None):
    """A ``run_pass`` for `confirm_spill` and the ``spills`` it fills: pass i times 8 pairs at (reference ms,
    candidate ms) and reads each candidate call's spill as passes[i][2] us (the reference's: 20 us), handing the
    samples to ``rounds`` when given. ``ran`` counts the passes run."""
    spills: dict[str, list[float]] = {"reference": [], "candidate": []}
    ran = []

    def run_pass():
        ref, cand, spill = passes[len(ran)]
        ran.append(1)
        for i in range(8):
            spills["reference"].append(20.0)
            spills["candidate"].append(spill)
            if rounds is not None:
                rounds.begin(last=i == 7, check=False)
                rounds.took("reference", [], ref)
                rounds.took("candidate", [], cand)
                rounds.end()
        return [ref] * 8, [cand] * 8, f"pass {len(ran)}"

    return run_pass, spills, ran


def test_a_spill_in_one_pass_only_is_timed_again_and_the_slower_pass_kept():
    rounds = TimedRounds(None, [[]], [[]], lambda *a: None, lambda out: out, 0.0)
    # an honest kernel whose first pass read a host hiccup (80 us past the end event against 20 us)
    run_pass, spills, ran = spilling_passes([(1.0, 0.5, 80.0), (1.0, 0.6, 21.0)], rounds)
    ref_ms, cand_ms, stop, note = confirm_spill(run_pass, spills, rounds)
    assert len(ran) == 2 and cand_ms == [0.6] * 8 and stop == "pass 2"
    assert "timed twice" in note and "(median 80 us past it, the reference's 20 us)" in note
    assert "the second, the lower, kept" in note
    assert rounds.samples["candidate"] == [[0.6] * 8]  # the samples per placement are the kept pass's
    # the first pass slower: it is kept, with its samples put back
    rounds = TimedRounds(None, [[]], [[]], lambda *a: None, lambda out: out, 0.0)
    run_pass, spills, ran = spilling_passes([(1.0, 0.7, 200.0), (1.0, 0.4, 21.0)], rounds)
    ref_ms, cand_ms, stop, note = confirm_spill(run_pass, spills, rounds)
    assert cand_ms == [0.7] * 8 and "the first, the lower, kept" in note
    assert rounds.samples["candidate"] == [[0.7] * 8]


def test_work_left_on_a_side_stream_in_both_passes_is_refused_and_a_clean_pass_is_not_repeated():
    run_pass, spills, ran = spilling_passes([(1.0, 0.2, 300.0), (1.0, 0.2, 290.0)])
    with pytest.raises(TimedCheckFailed, match="left GPU work running.*in two timing passes"):
        confirm_spill(run_pass, spills)
    assert len(ran) == 2
    run_pass, spills, ran = spilling_passes([(1.0, 0.5, 30.0)])
    assert confirm_spill(run_pass, spills)[3] == "" and len(ran) == 1  # within 25 us of the reference: one pass
