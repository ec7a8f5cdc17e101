"""Scratch directories a killed pool leaves behind (`lifecycle.sweep_scratch`): a later pool deletes those whose
pool process is gone, and nothing else: not a living pool's, not another PID namespace's, not other files."""

from __future__ import annotations

import os
import subprocess
import sys

from kzcore.executors import lifecycle


def test_a_dead_pools_scratch_is_swept_and_a_living_ones_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(lifecycle.tempfile, "tempdir", str(tmp_path))
    mine = lifecycle.make_scratch(3)
    assert os.path.basename(mine).startswith(f"kz-sandbox3-p{os.getpid()}.{lifecycle._pid_namespace()}-")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    namespace = lifecycle._pid_namespace()
    dead = tmp_path / f"kz-sandbox0-p{dead_pid}.{namespace}-abc123"
    (dead / "caches" / "triton").mkdir(parents=True)
    (dead / "caches" / "triton" / "kernel.so").write_bytes(b"\0" * 1024)
    elsewhere = tmp_path / f"kz-sandbox0-p{dead_pid}.{namespace}1-abc123"  # another PID namespace: not judged
    unrelated = tmp_path / "kz-sandbox-notes"
    for path in (elsewhere, unrelated):
        path.mkdir()
    old_style = tmp_path / "kz-sandbox1-x7q2"  # no owner in its name
    old_style.mkdir()
    (tmp_path / f"kz-sandbox2-p{dead_pid}.{namespace}-file").write_text("not a directory")

    assert lifecycle.sweep_scratch() == 1
    assert not dead.exists()
    assert os.path.isdir(mine) and elsewhere.is_dir() and unrelated.is_dir() and old_style.is_dir()
    assert (tmp_path / f"kz-sandbox2-p{dead_pid}.{namespace}-file").exists()
    assert lifecycle.sweep_scratch(str(tmp_path)) == 0  # nothing more to do
