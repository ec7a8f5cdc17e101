"""kz_suites: the ``builtin`` problem suite (27 level-1 and 13 level-2 KernelBench-format problems, and
reference solutions under ``solutions/<language>/levelN/``), registered like any third-party suite.

The suite's files are data that the core loads by path; its CUDA solutions import kz_cuda, which is why they
live here and not in the core. See docs/suite.md.
"""

from __future__ import annotations

from pathlib import Path

from kzcore import hookimpl

BUILTIN_SUITE = Path(__file__).resolve().parent / "builtin"


@hookimpl
def kz_register_suites(register):
    register("builtin", BUILTIN_SUITE)
