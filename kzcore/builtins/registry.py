"""Built-in registrations: the local executor, the built-in suite, and the default forward runner."""

from __future__ import annotations

from pathlib import Path

from kzcore import hookimpl

BUILTIN_SUITE = Path(__file__).resolve().parent.parent / "suites" / "builtin"


@hookimpl(trylast=True)
def kz_register_executors(register):
    from kzcore.executors.local import LocalPool

    register("local", LocalPool)


@hookimpl(trylast=True)
def kz_register_suites(register):
    register("builtin", BUILTIN_SUITE)


@hookimpl(trylast=True)
def kz_run_forward(language, model, inputs):
    return model(*inputs)
