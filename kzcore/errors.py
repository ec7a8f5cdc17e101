"""Exceptions that cross the plugin boundary. Candidate failures are data (EvalResult), not these,
except CompileError, which a language plugin raises from kz_load_candidate and the evaluator files. Also
`Terminated`, SIGTERM as an exception (`sigterm_raises`), which `kz` and the benches share."""

import contextlib
import signal
import threading


class KzError(Exception):
    """A user-facing error: the CLI prints its message on one line and exits non-zero."""


class UnknownLanguageError(KzError):
    pass


class ProblemFormatError(KzError):
    pass


class CompileError(Exception):
    """Raised by a language plugin when a candidate does not build or import.

    ``log`` holds the compiler's or importer's message, trimmed to what a model can act on.
    """

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


class TimedCheckFailed(Exception):
    """Raised by the timed rounds (`kzcore.timed`) when a timed call's outputs are wrong, or not the
    candidate's own: the evaluator files it as ``hack_suspected``; a timer plugin lets it propagate."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's pre-emption, ``timeout`` at its limit) raised in the main thread by
    `sigterm_raises`, its text the signal's name: the work unwinds exactly as on Ctrl-C, through every
    ``finally`` (worker pools closed, files flushed), and keeps what it computed. A KeyboardInterrupt, so every
    Ctrl-C path handles it and no ``except Exception`` recording a kernel's failure swallows it."""


@contextlib.contextmanager
def sigterm_raises():
    """Within the block SIGTERM raises `Terminated` (held back inside `sigterm_deferred`); the handler that was
    there before is put back after. Outside the main thread, where no handler can be set, SIGTERM is left as it
    is."""

    def handler(signum, frame):
        if _deferral["depth"]:
            _deferral["pending"] = signal.Signals(signum).name
            return
        raise Terminated(signal.Signals(signum).name)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


_deferral: dict = {"depth": 0, "pending": None}


@contextlib.contextmanager
def sigterm_deferred():
    """A step that must not be cut halfway: a SIGTERM that `sigterm_raises` turns into `Terminated` within the
    block is raised when the block ends instead. Handing a new worker process its start-up data is one: cut
    there, the child dies on a half-read pickle and prints its traceback after the run's last words. In the
    main thread only (where the handler raises); elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferral["depth"] += 1
    try:
        yield
    finally:
        _deferral["depth"] -= 1
        if not _deferral["depth"] and _deferral["pending"]:
            name, _deferral["pending"] = _deferral["pending"], None
            raise Terminated(name)
