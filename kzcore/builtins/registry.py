"""Built-in registrations: the local executor and the default forward runner. (The ``builtin`` problem suite
is a plugin, kz_suites: the core ships no problems.)"""

from __future__ import annotations

from kzcore import hookimpl


@hookimpl(trylast=True)
def kz_register_executors(register):
    from kzcore.executors.local import LocalPool

    register("local", LocalPool)


@hookimpl(trylast=True)
def kz_run_forward(language, model, inputs):
    return model(*inputs)


kz_run_forward.plain_call = True  # the evaluator calls the model itself where only this runner is registered
