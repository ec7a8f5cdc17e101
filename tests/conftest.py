"""Fixtures of tests/ alone; the root conftest.py holds those the plugins' tests share, and SLOW_FIXTURES."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def rank_processes():
    """Starts torch.distributed ranks (tests/fakes_dist.py, gloo) as processes that import torch: seconds."""
    started: list[subprocess.Popen] = []

    def start(args: Callable[[int], list[str]], world: int = 2) -> list[subprocess.Popen]:
        """``world`` ranks on a free local port, rank r given ``args(r)``; the caller waits for them."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        for rank in range(world):
            command = [sys.executable, "-m", "tests.fakes_dist", str(rank), str(world), port, *args(rank)]
            started.append(subprocess.Popen(command, cwd=ROOT))
        return started[-world:]

    yield start
    for proc in started:  # a rank left running by a failed test
        if proc.poll() is None:
            proc.kill()
            proc.wait()
