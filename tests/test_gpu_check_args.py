"""scripts/gpu-check hands the test stages' -k expression to pytest whole (KZ_TEST_K), spaces and all; run on a
CPU with a stand-in for python that records its arguments (nothing is installed or tested)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_k_expression_with_spaces_reaches_pytest_as_one_argument(tmp_path):
    calls = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" "--" >> {calls}\n')
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=str(fake), OUT=str(tmp_path / "out"), KZ_STAGES="tests,plugin-tests")
    env.update(KZ_TEST_K="graph or hf_on_cuda", KZ_TEST_ARGS="--maxfail=2 -x")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/gpu-check")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    calls_made = [c.splitlines() for c in calls.read_text().split("--\n")]
    pytest_calls = [c for c in calls_made if c[:2] == ["-m", "pytest"]]
    # the whole GPU suite does not fit one device call: tests/ and plugins/ are two stages, in that order
    assert [c[-1] for c in pytest_calls] == ["tests", "plugins"]
    for pytest_call in pytest_calls:
        k = pytest_call.index("-k")
        assert pytest_call[k + 1] == "graph or hf_on_cuda"
        assert "--maxfail=2" in pytest_call and "-x" in pytest_call
    assert "== tests rc=0" in done.stdout and "== plugin-tests rc=0" in done.stdout
