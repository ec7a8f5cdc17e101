"""Exceptions that cross the plugin boundary. Candidate failures are data (EvalResult), not these,
except CompileError, which a language plugin raises from kz_load_candidate and the evaluator files."""


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
