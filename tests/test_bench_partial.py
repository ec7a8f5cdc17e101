"""Every bench keeps what it measured when it is cut short (bench/report.py): SIGTERM (what gpu-check's ``timeout``
sends) or Ctrl-C writes the report so far with ``"partial": true`` and ``"cut_short"``, says so in one line on
stderr and exits 128 + the signal. Three benches with a CPU mode are cut by a real SIGTERM in a subprocess (the
harness and the fault bench with their worker pools, the Triton compile bench); the report assembly of the others
(GPU-only or slow on a CPU) is run on partial data."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_timing_checkpoint import _alive, _pool_workers, _wait_until

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bench(monkeypatch):
    """The bench modules, imported as the benches import each other (``bench.`` from the root)."""
    monkeypatch.syspath_prepend(str(ROOT))
    import bench

    return bench


# --- bench/report.py: cut_short ------------------------------------------------------------------------------


def test_cut_short_writes_the_partial_report_and_returns_128_plus_the_signal(bench, tmp_path, capsys):
    """SIGTERM (`Terminated`): the report as assembled, ``partial`` set true and ``cut_short`` "SIGTERM", written
    atomically, one line on stderr, 143; Ctrl-C: "KeyboardInterrupt" and 130."""
    from bench.report import Terminated, cut_short

    out = tmp_path / "sub" / "r.json"
    assert cut_short("x.py", out, Terminated("SIGTERM"), lambda: {"bench": "x", "partial": False, "rows": [1]}) == 143
    assert json.loads(out.read_text()) == {"bench": "x", "partial": True, "rows": [1], "cut_short": "SIGTERM"}
    assert capsys.readouterr().err == f"x.py: SIGTERM: stopped; partial report in {out}\n"
    assert [p.name for p in out.parent.iterdir()] == ["r.json"]

    assert cut_short("x.py", out, KeyboardInterrupt(), lambda: {"rows": []}) == 130
    assert json.loads(out.read_text()) == {"rows": [], "partial": True, "cut_short": "KeyboardInterrupt"}


def test_cut_short_without_out_prints_and_a_failing_assembly_is_a_line_not_an_error(bench, tmp_path, capsys):
    """No --out: the partial report on stdout. An assembly that raises leaves the file there before (a
    checkpoint) as it was, and the line says why there is no partial report; the exit status stays 143."""
    from bench.report import Terminated, cut_short

    assert cut_short("x.py", None, Terminated("SIGTERM"), lambda: {"rows": [2]}) == 143
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"rows": [2], "partial": True, "cut_short": "SIGTERM"}
    assert "partial report on stdout (no --out)" in captured.err

    out = tmp_path / "r.json"
    out.write_text('{"checkpoint": 1}')

    def broken():
        raise KeyError("rows")

    assert cut_short("x.py", out, Terminated("SIGTERM"), broken) == 143
    assert json.loads(out.read_text()) == {"checkpoint": 1}
    assert "x.py: SIGTERM: stopped; no partial report (KeyError" in capsys.readouterr().err


# --- a real SIGTERM, on the CPU ---------------------------------------------------------------------------------


def _cut_by_sigterm(cmd: list[str], tmp_path: Path, started: str, pool: bool = False, timeout_s: float = 120):
    """Run ``cmd`` from the repository root and send it SIGTERM once a line of its stderr matches ``started``
    (the bench is measuring) and, with ``pool``, a pool worker of it is running (a worker ending after a fault
    may be being replaced just then). Returns the exit status, the stderr, the pool workers it had when signalled
    and the temporary folder its processes used (TMPDIR: the pool's scratch folders are made there)."""
    err_path, scratch = tmp_path / "stderr.txt", tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "KZ_LOAD_PLUGINS": "triton,suites"}  # conftest: no entry points
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        seen = _wait_until(
            lambda: re.search(started, err_path.read_text(), re.MULTILINE) or proc.poll() is not None, timeout_s
        )
        assert seen and proc.poll() is None, f"never saw {started!r}:\n{err_path.read_text()[-2000:]}"
        workers = _wait_until(lambda: _pool_workers(proc.pid) or proc.poll() is not None, 30) if pool else []
        assert proc.poll() is None, err_path.read_text()[-2000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err_path.read_text(), workers, scratch


def _pool_closed(workers, scratch: Path) -> None:
    """The bench closed its pool: the workers it had are gone and no worker's scratch folder is left (the pool
    deletes each as it reaps its worker; multiprocessing's own clean-up at exit would leave them)."""
    assert workers and not [pid for pid in workers if _alive(pid)], "pool workers outlived the bench"
    assert not list(scratch.glob("kz-sandbox*")), "the pool was not closed"


def _partial_report(out: Path, stderr: str, script: str) -> dict:
    """The report a SIGTERM left: the last stderr line names it, it is whole JSON, partial, cut by SIGTERM."""
    assert stderr.strip().splitlines()[-1] == f"{script}: SIGTERM: stopped; partial report in {out}"
    report = json.loads(out.read_text())
    assert report["partial"] is True and report["cut_short"] == "SIGTERM"
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    return report


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the pool's workers from /proc (Linux)")
def test_harness_cut_by_sigterm_keeps_the_latencies_measured(tmp_path, own_workers):
    """bench/harness.py on the CPU (interpreter, small sizes), SIGTERM once the first latency is printed: exit
    143, the latency rows so far in a partial report with their summary, the pool's workers gone."""
    out = tmp_path / "out" / "harness.json"
    cmd = [sys.executable, "bench/harness.py", "--levels", "1", "--device", "cpu", "--size", "small",
           "--workers", "1", "--out", str(out)]  # fmt: skip
    rc, stderr, workers, scratch = _cut_by_sigterm(cmd, tmp_path, r"^level1/\S+ +\w+ +e2e ", pool=True)
    assert rc == 128 + signal.SIGTERM, stderr[-2000:]
    report = _partial_report(out, stderr, "harness.py")
    assert report["bench"] == "harness" and 1 <= len(report["results"]) < 27
    assert report["summary"]["all"]["candidates"] == len(report["results"]) and report["throughput"] is None
    assert report["results"][0]["problem"].startswith("level1/") and report["results"][0]["e2e_s"] > 0
    _pool_closed(workers, scratch)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the pool's workers from /proc (Linux)")
def test_faults_cut_by_sigterm_counts_what_ran_and_loses_nothing(tmp_path, own_workers):
    """bench/faults.py on the CPU, SIGTERM after its first result: exit 143; the partial report counts the
    results it had, the jobs without one as not run (not lost), no harness crash; the pool's workers gone."""
    out = tmp_path / "out" / "faults.json"
    cmd = [sys.executable, "bench/faults.py", "--n", "4", "--device", "cpu", "--workers", "1", "--timeout", "5",
           "--out", str(out)]  # fmt: skip
    rc, stderr, workers, scratch = _cut_by_sigterm(cmd, tmp_path, r"^\[1/4 ", pool=True)
    assert rc == 128 + signal.SIGTERM, stderr[-2000:]
    report = _partial_report(out, stderr, "faults.py")
    assert report["bench"] == "faults" and report["candidates"] == 4 and 1 <= report["results"] < 4
    assert report["lost_results"] == 0 and report["not_run"] == 4 - report["results"]
    assert report["harness_crashes"] == 0 and sum(sum(v.values()) for v in report["per_kind"].values()) >= 1
    _pool_closed(workers, scratch)


def test_triton_compile_cut_by_sigterm_keeps_the_kernels_compiled(tmp_path, native_build):
    """bench/triton_compile.py (no GPU needed), SIGTERM once the first kernel's time is printed: exit 143 and the
    kernels compiled so far in a partial report."""
    out = tmp_path / "out" / "compile.json"
    cmd = [sys.executable, "bench/triton_compile.py", "--conv-solutions", "--repeats", "2", "--out", str(out)]
    rc, stderr, _, _ = _cut_by_sigterm(cmd, tmp_path, r"PTX lines$")
    assert rc == 128 + signal.SIGTERM, stderr[-2000:]
    report = _partial_report(out, stderr, "triton_compile.py")
    assert report["bench"] == "triton-compile" and 1 <= len(report["results"]) < 6
    assert report["results"][0]["kernel"] == "conv_relu_bias_kernel" and report["results"][0]["median_s"] > 0


# --- the report assembly of the other benches, on partial data ---------------------------------------------------


def test_harness_reports_with_no_pool_and_a_scaling_run_missing(bench):
    """The latency report before the pool started (nothing measured); --scaling with only the 1-GPU run and
    its second level cut short: that run's finished level counted, no ratio."""
    from bench.harness import latency_report, scaling_report

    report = latency_report({"rows": [], "throughput": None}, partial=True)
    assert report["partial"] is True and report["workers"] is None and report["total_s"] is None
    assert report["summary"]["all"] == {"candidates": 0, "correct": 0, "e2e_median_s": None, "e2e_p90_s": None,
                                        "evals_per_min": None, "stage_median_s": {}}  # fmt: skip
    one = {"measure": "saturated", "level1": {"candidates": 30, "wall_s": 60.0, "evals_per_min": 30.0},
           "level2": {"candidates": 3, "wall_s": 5.0, "evals_per_min": 36.0, "cut_short": True}}  # fmt: skip
    scaling = scaling_report({1: one}, 2, "cpu", partial=True)
    assert scaling["evals_per_min"] == {"1gpu": 30.0} and scaling["ratio"] is None
    assert scaling["ratio_per_level"] == {} and scaling["measure"] == "saturated"


def test_schedule_report_with_the_first_batch_cut_short(bench):
    """No batch done: no runs, no ratio, the batch it was in with its results so far."""
    from bench.schedule import schedule_report

    args = SimpleNamespace(workers=2, device="cpu")
    state = {"jobs": 39, "runs": {}, "running": {"order": "fifo", "results": 5, "elapsed_s": 3.2}}
    report = schedule_report(state, args, partial=True)
    assert report["runs"] == {} and report["wall_ratio_fifo_over_longest_first"] is None
    assert report["cut_short_in"] == {"order": "fifo", "results": 5, "elapsed_s": 3.2} and report["jobs"] == 39
    state = {"jobs": 39, "runs": {"fifo": {"wall_s": 4.0}, "longest_first": {"wall_s": 2.0}}}
    assert schedule_report(state, args, partial=False)["wall_ratio_fifo_over_longest_first"] == 2.0


def test_sampling_report_with_one_batch_size_measured(bench):
    """One batch size of two measured: its run, no speedup; none measured (the model still loading): no runs."""
    from bench.sampling import sampling_report

    args = SimpleNamespace(model="config", device="cpu", max_new_tokens=64)
    run = {"batch_size": 1, "tokens_per_s": 10.0}
    report = sampling_report({"load_before": 0.5, "load_s": 1.2, "runs": [run]}, args, partial=True)
    assert report["runs"] == [run] and report["speedup_tokens_per_s"] is None and report["prompts"] == 16
    assert sampling_report({"load_before": 0.5, "load_s": None, "runs": []}, args, partial=True)["load_s"] is None


def test_train_step_report_before_the_trainer_and_mid_training(bench, tmp_path):
    """Cut before the trainer existed: no steps, no figures. Cut mid-training (one step done, one reward row
    written, a second cut in the middle of its line): the step's figures from the rows there are."""
    from bench.train_step import train_step_report

    args = SimpleNamespace(model="tiny")
    state = {"args": args, "cuda": False, "work": tmp_path, "generation_s": []}
    report = train_step_report(state, partial=True)
    assert report["steps"] == 0 and report["seconds_per_step"] is None and report["params"] is None

    (tmp_path / "rewards.jsonl").write_text(
        '{"eval_seconds": 1.0, "reward_mean": 0.5, "statuses": {"correct": 4}}\n{"eval_'
    )
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=1), model=SimpleNamespace(parameters=lambda: []))
    settings = SimpleNamespace(batch_size=8, max_completion_length=128)
    state.update(trainer=trainer, settings=settings, t0=time.perf_counter() - 4.0, generation_s=[2.0])
    report = train_step_report(state, partial=True)
    assert report["steps"] == 1 and report["completions_per_step"] == 8 and report["reward_mean"] == 0.5
    assert report["generation_s_per_step"] == 2.0 and report["evaluation_s_per_step"] == 1.0
    assert report["seconds_per_step"] >= 4.0 and report["statuses"] == [{"correct": 4}]


def test_cuda_compile_report_before_the_import_and_with_sections_not_reached(bench):
    """Cut while importing kz_cuda: nothing timed, no medians. Cut in the NVRTC loop with --inline asked
    for: the solutions done, cuda_inline None (not reached)."""
    from bench.cuda_compile import cuda_compile_report

    args = SimpleNamespace(repeats=5, inline=True, e2e=False)
    report = cuda_compile_report({"per_solution": {}}, args, partial=True)
    assert report["solutions"] == 0 and report["median_of_medians_s"] is None and report["nvrtc"] is None
    assert report["cuda_inline"] is None and report["e2e"] == "not asked for (--e2e)"
    per = {"level1/1_ReLU": {"median_s": 0.02}, "level1/2_GELU": {"median_s": 0.04}}
    report = cuda_compile_report({"per_solution": per, "arch": "sm_90"}, args, partial=True)
    assert report["solutions"] == 2 and report["median_of_medians_s"] == 0.03 and report["max_median_s"] == 0.04


def test_placement_probe_summary_of_a_run_cut_in_the_heat_mode(bench):
    """The rows of a run cut after the first heat phase (one busy row): the placements' spreads, and the heat
    mode's busy mean alone (no idle yet); no rows: an empty summary."""
    from bench.placement_probe import placement_report, placement_summary

    rows = [{"how": "base", "where": 0, "ref_ms": 1.0, "cand_ms": 0.5}]
    rows += [{"how": "outputs", "where": i, "ref_ms": 1.0, "cand_ms": 0.5 + i / 10} for i in range(2)]
    rows += [{"how": "heat", "where": "busy0", "ref_ms": 1.2, "cand_ms": 0.7}]
    summary = placement_summary(rows)
    assert set(summary) == {"outputs", "heat"} and summary["heat"] == {"busy": {"ref": 1.2, "cand": 0.7}}
    assert summary["outputs"]["cand_min"] == 0.5 and summary["outputs"]["cand_max"] == 0.6
    report = placement_report({"rows": []}, SimpleNamespace(problem="22_MatVec"), partial=True)
    assert report["summary"] == {} and report["rows"] == [] and report["wall_s"] is None


def test_interference_probe_report_of_a_run_cut_in_its_second_activity(bench):
    """The first activity's summary and the second's rows so far (no summary for it yet)."""
    from bench.interference_probe import interference_report

    rows = [{"activity": "idle", "round": 0, "ref_ms": 1.0, "cand_ms": 0.5}, {"activity": "alloc", "round": 0,
            "ref_ms": 1.1, "cand_ms": 0.6}]  # fmt: skip
    state = {"rows": rows, "summary": {"idle": {"ref_ms": 1.0}}, "timelines": [], "t0": time.perf_counter()}
    report = interference_report(state, SimpleNamespace(problem="8_MeanReduction", set=""), partial=True)
    assert report["partial"] is True and report["rows"] == rows and list(report["summary"]) == ["idle"]
    assert report["timelines"] == [] and report["wall_s"] >= 0


def test_train_step_bench_runs_a_grpo_step_on_cpu(tmp_path, training):
    """bench/train_step.py end to end on a CPU with a tiny model (gpu-check's train-step stage runs it on the GPU):
    one GRPO step through the evaluator pool, the report complete. It had fallen behind the trainer's
    ``task_dataset`` signature, found only on reading it."""
    out = tmp_path / "ts.json"
    proc = subprocess.run(
        [sys.executable, "bench/train_step.py", "--model", "tiny", "--steps", "1", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "KZ_LOAD_PLUGINS": "triton,suites", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["partial"] is False and report["device"] == "cpu" and report["steps"] == 1
    assert report["seconds_per_step"] > 0 and report["completions_per_step"] == 8
