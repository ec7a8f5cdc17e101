"""The tracked tree stays small enough for the GPU machine: every call to it carries the tracked files (and
untracked ones git does not ignore) within 64 MiB, and the embedded model (94 MiB) goes in beside them in parts
(scripts/gpu-train pack). Records that grow it (a KernelBench evaluation's completions and verdicts are
megabytes) are committed gzipped: kzcore's JSONL readers take X.jsonl.gz (docs/gpu.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT_MIB = 32  # leaves 30 MiB a call for the model's parts: at most 4 calls bring it in


def tracked_bytes() -> int:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return sum((ROOT / name).stat().st_size for name in out.decode().split("\0") if name and (ROOT / name).is_file())


def test_the_tracked_tree_leaves_room_for_the_model_in_a_gpu_call():
    size = tracked_bytes()
    assert size < LIMIT_MIB * 2**20, (
        f"the tracked files take {size / 2**20:.1f} MiB, over {LIMIT_MIB}: gzip large records "
        "(find DIR -name '*.jsonl' -size +32k -exec gzip -9n {} +) or leave them out"
    )
