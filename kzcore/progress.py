"""Progress of a long step (sampling, evaluating) for commands that run for minutes: a live bar on a
terminal, and on anything else (a log file, CI) a line at the start, at most one every ``every_s`` seconds,
and one at the end, so a run is never silent for long. Used by the trainer; `kz eval` has its own bar."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


class Progress:
    """``with Progress(label, total, log) as p: p.advance(k, note)``. ``total`` may be set later
    (``p.start(total)``) when it is only known once the step begins (results already on disk are skipped)."""

    def __init__(
        self, label: str, total: int | None, log: Callable[[str], None] = print, every_s: float = 15.0, live=None
    ):
        self.label, self.total, self.log, self.every_s = label, total, log, every_s
        self.done = 0
        self.note = ""
        # a live bar only when the log is plain printing to a terminal (a test's or a caller's log gets lines)
        self.live = (log is print and sys.stdout.isatty()) if live is None else live
        self._bar = self._task = None
        self._t0 = self._last = time.monotonic()

    def __enter__(self) -> Progress:
        if self.total is not None:
            self.start(self.total)
        return self

    def start(self, total: int) -> None:
        self.total = total
        self._t0 = self._last = time.monotonic()
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn(self.label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.description}"),
            )  # fmt: skip
            self._bar.start()
            self._task = self._bar.add_task("", total=total)
        else:
            self.log(f"{self.label}: 0/{total}")

    def advance(self, k: int = 1, note: str = "") -> None:
        self.done += k
        self.note = note or self.note
        if self._bar is not None:
            self._bar.update(self._task, advance=k, description=self.note)
            return
        now = time.monotonic()
        if now - self._last >= self.every_s and self.done < (self.total or 0):
            self._last = now
            self.log(f"{self.label}: {self.done}/{self.total} ({now - self._t0:.0f} s){self._suffix()}")

    def _suffix(self) -> str:
        return f", {self.note}" if self.note else ""

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.total is not None and exc[0] is None:
            self.log(f"{self.label}: {self.done}/{self.total} in {time.monotonic() - self._t0:.0f} s{self._suffix()}")
