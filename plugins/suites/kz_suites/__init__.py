"""kz_suites: the ``builtin`` problem suite (27 level-1 and 13 level-2 KernelBench-format problems, and
reference solutions under ``solutions/<language>/levelN/``), and ``kernelbench``, KernelBench's own level-1
and level-2 files vendored unchanged (``kernelbench/``: licence, provenance in its README), both registered
like any third-party suite.

The suites' files are data that the core loads by path; the builtin CUDA solutions import kz_cuda, which is
why they live here and not in the core. The core reads the registered ``kernelbench`` folder as the default
KernelBench checkout, so ``--problems kernelbench:1`` works without one, while ``--kernelbench PATH`` or
$KZ_KERNELBENCH (a user's newer checkout) still wins. See docs/suite.md.
"""

from __future__ import annotations

from pathlib import Path

from kzcore import hookimpl

BUILTIN_SUITE = Path(__file__).resolve().parent / "builtin"
KERNELBENCH_COPY = Path(__file__).resolve().parent / "kernelbench" / "KernelBench"  # holds level1/, level2/


@hookimpl
def kz_register_suites(register):
    register("builtin", BUILTIN_SUITE)
    register("kernelbench", KERNELBENCH_COPY)
