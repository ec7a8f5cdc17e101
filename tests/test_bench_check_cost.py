"""bench/check_cost.py on the CPU: its pieces are timed and written, and the one-pass Triton check it offers as a
replacement (under Triton's interpreter here) reaches the evaluator's verdict on every case it tries, and the
same figures as the evaluator's own check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_a_cpu_run_times_every_piece_and_the_fused_check_agrees(tmp_path):
    out = tmp_path / "check-cost.json"
    cmd = [sys.executable, "-m", "bench", "run", "check_cost", "--device", "cpu", "--sizes", "20000",
           "--repeats", "1", "--fused", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    for piece in ("check_s", "elementwise_s", "relative_error_s", "snapshot_s", "draw_refill_s", "fused_s"):
        assert row[piece] > 0, piece
    agreement = row["fused_agreement"]
    assert agreement["agree"] is True
    assert [agreement[case]["evaluator"] for case in ("passing", "one_out", "nan", "small")] == [
        True, False, False, False,
    ]  # fmt: skip


FIGURES = """
import json, torch
from bench import check_cost
from kzcore.evaluate.magnitude import relative_errors

torch.manual_seed(1)
e = torch.randn(10_000)
a = e + 0.02 * torch.randn_like(e)  # some elements out of tolerance
diff = (a - e).abs()
fused = check_cost.fused_check(e, a, 1e-2, 1e-2)
out = {
    "fused": fused,
    "outside": int((diff > 1e-2 + 1e-2 * e.abs()).sum()),
    "max_abs": float(diff.max()),
    "max_rel": float((diff / e.abs().clamp_min(1e-2)).max()),
    "rel_err": relative_errors([e], [a])[0],
    "was_out": bool(diff[7] > 1e-2 + 1e-2 * e[7].abs()),
}
e[7] = a[7] = float("inf")
out["again"] = check_cost.fused_check(e, a, 1e-2, 1e-2)
out["again_rel_err"] = relative_errors([e], [a])[0]
print(json.dumps(out))
"""


def test_the_fused_figures_match_the_evaluators():
    """Its count of elements outside tolerance, largest errors and error norm are the evaluator's; a reference's
    non-finite elements are left out of the norms as the evaluator leaves them (a matching infinity still counts
    as outside in one pass, as in the evaluator's own fast path, whose exact path then decides). In a fresh
    interpreter: Triton's interpreter mode is read when triton is first imported."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", FIGURES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    fused = got["fused"]
    assert fused["out"] == got["outside"] > 0
    assert fused["max_abs"] == pytest.approx(got["max_abs"]) and fused["max_rel"] == pytest.approx(got["max_rel"])
    assert fused["rel_err"] == pytest.approx(got["rel_err"], rel=1e-5)
    assert got["again"]["out"] == fused["out"] + (0 if got["was_out"] else 1)
    assert got["again"]["rel_err"] == pytest.approx(got["again_rel_err"], rel=1e-5)
