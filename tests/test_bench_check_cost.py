"""bench/check_cost.py on the CPU: its pieces are timed and written, and the check with kz_triton's one-pass
kernel (under Triton's interpreter here) reaches the torch check's verdict on every case it tries (the kernel's
own figures: plugins/triton/tests/test_triton_check.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_cpu_run_times_every_piece_and_the_fused_check_agrees(tmp_path):
    out = tmp_path / "check-cost.json"
    cmd = [sys.executable, "-m", "bench", "run", "check_cost", "--device", "cpu", "--sizes", "20000",
           "--repeats", "1", "--fused", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    for piece in ("check_s", "elementwise_s", "relative_error_s", "snapshot_s", "draw_refill_s", "spots_s", "fused_s"):
        assert row[piece] > 0, piece
    agreement = row["fused_agreement"]
    assert agreement["agree"] is True
    assert [agreement[case]["evaluator"] for case in ("passing", "one_out", "nan", "small")] == [
        True, False, False, False,
    ]  # fmt: skip
