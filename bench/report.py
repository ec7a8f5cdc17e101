"""What every bench shares for writing its report so that an interrupted run keeps what it measured: the report
written atomically (`write_json_atomic`), SIGTERM (what gpu-check's ``timeout`` sends at its limit) raised as
`Terminated` within `sigterm_raises`, and `cut_short`: the run stopped by SIGTERM or Ctrl-C, what was measured
written with ``"partial": true`` and ``"cut_short"``, one line on stderr, the exit status 128 + the signal.

A bench's measuring part, typically::

    try:
        with sigterm_raises():
            measure(state)
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("harness.py", args.out, exc, lambda: assemble(state, partial=True))
    return complete(assemble(state, partial=False), args.out)
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from kzcore.errors import Terminated, sigterm_raises  # noqa: F401  (kz and the benches share SIGTERM handling)


def write_json_atomic(path: str | Path, data: dict) -> None:
    """``data`` as JSON at ``path``, replacing the file at once (kzcore.jsonl.write_text_atomic): a reader, or a
    kill in the middle of the write, finds the previous report or the new one, never half of one."""
    from kzcore.jsonl import write_text_atomic

    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def exit_status(exc: BaseException) -> int:
    """128 + the signal that stopped the run: 143 for SIGTERM (`Terminated`), 130 for Ctrl-C."""
    return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def cut_short(
    bench: str, out: str | Path | None, exc: BaseException, assemble: Callable[[], dict], detail: str = ""
) -> int:
    """A run stopped by ``exc`` (`Terminated` or KeyboardInterrupt; another exception's name where the caller
    re-raises it): the report ``assemble()`` makes of what was measured, with ``"partial": true`` and
    ``"cut_short"`` (``"SIGTERM"``, ``"KeyboardInterrupt"``, ...), written atomically to ``out`` (printed on
    stdout without one); one line on stderr says so, ``detail`` in brackets at its end. Returns the exit status
    (`exit_status`). A report that cannot be assembled or written is said so in that line, never raised."""
    why = str(exc) if isinstance(exc, Terminated) else type(exc).__name__
    try:
        report = assemble()
        report["partial"] = True
        report["cut_short"] = why
        if out:
            write_json_atomic(out, report)
            where = f"partial report in {out}"
        else:
            print(json.dumps(report, indent=2, default=str))
            where = "partial report on stdout (no --out)"
    except Exception as error:  # a checkpoint written before, if any, stays on disk
        where = f"no partial report ({type(error).__name__}: {error})"
    print(f"{bench}: {why}: stopped; {where}{f' ({detail})' if detail else ''}", file=sys.stderr, flush=True)
    return exit_status(exc)


def complete(report: dict, out: str | Path | None) -> int:
    """A run that finished: its report printed on stdout and written atomically to ``out`` when given; returns
    the exit status, 0."""
    print(json.dumps(report, indent=2, default=str))
    if out:
        write_json_atomic(out, report)
    return 0


def scratch_dir(prefix: str) -> str:
    """A new temporary directory, deleted when the bench's process exits: a bench's caches and work files, none
    of them a result."""
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path
