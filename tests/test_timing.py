"""The timing loop's early stop (kzcore.builtins.timing.interleaved), driven by a fake timer on the CPU."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kzcore.builtins.timing import interleaved, median_rel_error
from kzcore.types import EvalConfig


def fake_timer(noise: float, seed: int = 0):
    rng = random.Random(seed)
    calls = []

    def timed(fn) -> float:
        calls.append(fn)
        return fn() * (1 + rng.uniform(-noise, noise))

    return timed, calls


def ref():
    return 2.0


def cand():
    return 1.0


def test_steady_timings_stop_at_the_minimum_with_a_note():
    timed, calls = fake_timer(noise=0.001)
    ref_ms, cand_ms, note = interleaved(timed, ref, cand, 100, EvalConfig(min_reps=30, timing_precision=0.004))
    assert len(ref_ms) == len(cand_ms) == 30
    assert note == "stopped at 30 reps: medians within 0.4%"
    # order alternates: reference first on even pairs, candidate first on odd ones
    assert calls[:4] == [ref, cand, cand, ref]


def test_noisy_timings_run_every_rep():
    timed, _ = fake_timer(noise=0.5)
    ref_ms, cand_ms, note = interleaved(timed, ref, cand, 100, EvalConfig(min_reps=30, timing_precision=0.004))
    assert len(ref_ms) == 100 and note == ""
    assert median_rel_error(ref_ms) > 0.004


def test_precision_zero_always_runs_all_reps():
    timed, _ = fake_timer(noise=0.0)
    ref_ms, _, note = interleaved(timed, ref, cand, 100, EvalConfig(timing_precision=0.0))
    assert len(ref_ms) == 100 and note == ""


def test_fewer_reps_than_the_minimum_are_all_run():
    timed, _ = fake_timer(noise=0.0)
    ref_ms, _, _ = interleaved(timed, ref, cand, 12, EvalConfig(min_reps=30))
    assert len(ref_ms) == 12


def test_median_rel_error_shrinks_with_more_samples_and_is_infinite_for_few():
    rng = random.Random(1)
    few = [1 + rng.gauss(0, 0.01) for _ in range(20)]
    many = few + [1 + rng.gauss(0, 0.01) for _ in range(380)]
    assert median_rel_error(many) < median_rel_error(few)
    assert median_rel_error([1.0, 2.0]) == float("inf")


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


@pytest.mark.slow
def test_ground_truth_bench_smoke_on_cpu(tmp_path):
    """bench/timing.py --ground-truth end to end on the CPU (interpreter, wall clocks): the record has, per
    kernel, the in-process measurement, the pool's speedups with 1 and 4 workers per GPU, and the in-process
    times on separate allocations of the inputs."""
    import json
    import subprocess
    import sys

    out = tmp_path / "gt.json"
    cmd = [sys.executable, "bench/timing.py", "--device", "cpu", "--ground-truth", "--gt-problems", "1_ReLU",
           "--gt-runs-1", "1", "--gt-runs-4", "2", "--gt-placements", "2", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["smoke"] is True and report["bench"] == "timing-ground-truth"
    (row,) = report["ground_truth"]["rows"]
    assert row["kernel"] == "1_ReLU@small" and row["do_bench"]["ref_ms"] > 0
    assert row["kz_1w"]["statuses"] == ["correct"] and len(row["kz_4w"]["speedups"]) == 2
    assert "vs_do_bench" in row["kz_4w"]
    # the same kernel on two allocations of its inputs in the bench process, each kept while the next is made
    placed = row["placements"]
    assert placed["count"] == 2 and len(placed["sets"]) == 2 and all(r["cand_ms"] > 0 for r in placed["sets"])
    assert len({r["address"] for r in placed["sets"]}) == 2 and placed["cand_cv"] is not None
