"""bench/timing.py --ground-truth keeps what it measured: the report is on disk after every phase (partial, with
the phases done), written atomically, and a run cut short (an error, Ctrl-C, the SIGTERM of gpu-check's
``timeout``) writes what it has, says so in one line and closes its worker pool. On the CPU (smoke sizes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kzcore.types import EvalResult

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bench_modules(monkeypatch):
    """bench/timing.py and bench/timing_truth.py, imported as the bench imports them (``bench.`` from the root)."""
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import timing, timing_truth

    return timing, timing_truth


def _fake_pool(out: Path, seen: list, fail_at: int, error: BaseException):
    """A stand-in for timing_truth.through_pool: keeps the report on disk when called (what a kill at that
    moment would leave), files every kernel correct at 2x, and raises ``error`` for ``fail_at`` workers."""

    def through_pool(bench, case_list, workers_per_gpu, runs, compile_always):
        seen.append(json.loads(out.read_text()))
        if workers_per_gpu == fail_at:
            raise error
        fields = {"language": "triton", "sample": 0, "status": "correct", "ref_ms": 2.0, "cand_ms": 1.0, "speedup": 2.0}
        results = [EvalResult(problem=c["name"], level=1, origin=c["label"], **fields) for c in case_list]
        return {"pool_start_s": 0.1, "wall_s": 0.2, "started": "now", "by_label": {r.origin: [r] for r in results},
                "done_s": {(r.origin, r.sample): 0.2 for r in results}}  # fmt: skip

    return through_pool


def _run_main(timing, monkeypatch, out: Path):
    """timing.main() for a one-kernel CPU ground truth with one run through each pool."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # main() sets it for a smoke run; here the test owns it
    argv = ["timing.py", "--device", "cpu", "--ground-truth", "--gt-problems", "1_ReLU", "--gt-runs-1", "1",
            "--gt-runs-4", "1", "--self-ref-problems", "1_ReLU", "--passes", "1", "--out", str(out)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    return timing.main()


def test_the_report_is_on_disk_after_each_phase_and_an_error_keeps_it(bench_modules, monkeypatch, tmp_path, capsys):
    """After the direct measurements the report holds their rows and nothing of the pools; after the 1-worker
    pool, its speedups too; the 4-worker pool failing leaves both, marked partial, says so on stderr and
    propagates. The partial report is still read by bench/summarize.py and judged again by --rederive."""
    timing, timing_truth = bench_modules
    out, seen = tmp_path / "gt.json", []
    monkeypatch.setattr(timing_truth, "through_pool", _fake_pool(out, seen, 4, RuntimeError("4 workers failed")))
    with pytest.raises(RuntimeError, match="4 workers failed"):
        _run_main(timing, monkeypatch, out)

    after_direct, after_pool_1 = seen
    assert after_direct["partial"] is True and after_direct["phases_done"] == ["direct"]
    (row,) = after_direct["ground_truth"]["rows"]
    assert row["kernel"] == "1_ReLU@small" and row["do_bench"]["ref_ms"] > 0 and "kz_1w" not in row
    assert "self_reference" not in after_direct and after_direct["summary"]["self_reference_max_dev"] is None
    assert after_pool_1["phases_done"] == ["direct", "pool_1w"]
    assert after_pool_1["ground_truth"]["rows"][0]["kz_1w"]["speedups"] == [2.0]
    assert list(after_pool_1["ground_truth"]["pools"]) == ["1w"]

    report = json.loads(out.read_text())
    assert report["partial"] is True and report["phases_done"] == ["direct", "pool_1w"]
    assert report["cut_short"] == "RuntimeError" and report["ground_truth"]["rows"][0]["kz_1w"]["speedups"] == [2.0]
    assert [p.name for p in tmp_path.iterdir()] == ["gt.json"]  # no temporary file left beside it
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert str(out) in line and "phases done: direct, pool_1w" in line

    from bench.summarize import summarize

    assert "partial: True" in summarize(out, brief=True)
    again = tmp_path / "again.json"
    assert timing.rederive_main(str(out), str(again)) == 0
    judged = json.loads(again.read_text())
    assert judged["partial"] is True and judged["ground_truth"]["rederived"] == timing_truth.TRUTH_RULE
    assert judged["summary"]["kernels"] == 1 and judged["summary"]["self_reference_max_dev"] is None


def test_ctrl_c_writes_what_was_measured_and_exits_130(bench_modules, monkeypatch, tmp_path, capsys):
    """KeyboardInterrupt in the 1-worker pool: the direct measurements written as a partial report, exit 130."""
    timing, timing_truth = bench_modules
    out, seen, before = tmp_path / "gt.json", [], signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(timing_truth, "through_pool", _fake_pool(out, seen, 1, KeyboardInterrupt()))
    assert _run_main(timing, monkeypatch, out) == 130
    report = json.loads(out.read_text())
    assert report["partial"] is True and report["phases_done"] == ["direct"]
    assert report["cut_short"] == "KeyboardInterrupt" and len(report["ground_truth"]["rows"]) == 1
    assert "phases done: direct" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before  # the bench's handler was taken off again


def test_sigterm_raises_only_inside_and_the_previous_handler_comes_back(bench_modules):
    """sigterm_raises (bench/report.py): a SIGTERM inside the block is a `Terminated` naming the signal; the
    handler that was there before is back after it."""
    from bench.report import Terminated, sigterm_raises

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated, match="SIGTERM"), sigterm_raises():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # not slept: the handler raises as soon as the signal is taken
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_sigterm_inside_a_deferred_step_is_raised_when_the_step_ends():
    """sigterm_deferred (kzcore.errors): a step that must not be cut halfway (a worker handed its start-up
    data and made known to the pool) runs to its end under a SIGTERM, which is raised right after; nested
    steps raise only at the outermost end; a step without a SIGTERM raises nothing."""
    from kzcore.errors import Terminated, sigterm_deferred, sigterm_raises

    done = []
    with pytest.raises(Terminated, match="SIGTERM"), sigterm_raises():
        with sigterm_deferred():
            with sigterm_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
                done.append("inner")
            done.append("outer")
        done.append("after")  # not reached: raised as the outer step ended
    assert done == ["inner", "outer"]
    with sigterm_raises(), sigterm_deferred():
        done.append("quiet")
    assert done[-1] == "quiet"


def test_a_failed_write_leaves_the_previous_report_whole(bench_modules, tmp_path):
    """write_json_atomic (bench/report.py): the new report replaces the old at once; one that cannot be written
    (here a cycle) leaves the old file as it was and no temporary file."""
    from bench.report import write_json_atomic

    out = tmp_path / "sub" / "gt.json"
    write_json_atomic(out, {"partial": True, "phases_done": ["direct"]})
    cycle: dict = {}
    cycle["self"] = cycle
    with pytest.raises(ValueError):
        write_json_atomic(out, cycle)
    assert json.loads(out.read_text()) == {"partial": True, "phases_done": ["direct"]}
    assert [p.name for p in out.parent.iterdir()] == ["gt.json"]
    assert out.stat().st_mode & 0o777 == 0o644


def _pool_workers(pid: int) -> list[int]:
    """The spawned multiprocessing children of ``pid`` (LocalPool's workers), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid and b"spawn_main" in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):  # a process that ended while being read
            continue
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_until(what, timeout_s: float):
    """``what()`` once true, polled every 20 ms; None after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.02)
    return None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the pool's workers from /proc (Linux)")
def test_sigterm_mid_run_leaves_a_partial_report_and_no_pool_workers(tmp_path, own_workers):
    """gpu-check's ``timeout`` sends SIGTERM: sent once the report is first on disk and the 1-worker pool is
    running its jobs, the bench writes the direct measurements as a partial report, names the file and the
    phases done in one line, exits 143 and has closed its pool (every worker reaped, its scratch folder
    deleted: multiprocessing's own clean-up at exit would kill the workers but leave that)."""
    out = tmp_path / "gt.json"
    cmd = [sys.executable, "bench/timing.py", "--device", "cpu", "--ground-truth", "--gt-problems", "1_ReLU",
           "--gt-runs-1", "4", "--gt-runs-4", "0", "--self-ref-problems", "1_ReLU", "--out", str(out)]  # fmt: skip
    scratch = tmp_path / "tmp"  # the workers' scratch folders (kz-sandbox*): deleted when the pool reaps them
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_until(lambda: out.exists() or proc.poll() is not None, 120) and proc.poll() is None
        assert json.loads(out.read_text())["phases_done"] == ["direct"]
        # a worker writes each job's candidate into its scratch folder: the pool has started and is mapping
        running = _wait_until(lambda: list(scratch.glob("kz-sandbox*/*/kz_candidate_*.py")) or proc.poll(), 120)
        workers = _pool_workers(proc.pid)
        assert running and workers and proc.poll() is None, "no job of the 1-worker pool was seen running"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert not [pid for pid in workers if _alive(pid)], "pool workers outlived the bench"
    assert not list(scratch.glob("kz-sandbox*")), "the pool was not closed"
    line = stderr.strip().splitlines()[-1]
    assert "SIGTERM" in line and str(out) in line and "phases done: direct)" in line
    report = json.loads(out.read_text())
    assert report["partial"] is True and report["phases_done"] == ["direct"] and report["cut_short"] == "SIGTERM"
    (row,) = report["ground_truth"]["rows"]
    assert row["kernel"] == "1_ReLU@small" and row["do_bench"]["cand_ms"] > 0 and "kz_1w" not in row
