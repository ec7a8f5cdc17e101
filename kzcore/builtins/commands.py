"""Built-in registrations: kz's own commands, through the same hook as a plugin's (each is declared and run
by its module of `kzcore.cli`)."""

from __future__ import annotations

from kzcore import hookimpl


# trylast: first in pluggy's list of implementations, so kz's own commands come first in `kz --help`
@hookimpl(trylast=True)
def kz_register_commands(register):
    from kzcore.cli import coldstart, decontam, evaluation, plugins, proposer, report, sample, serve, suite, train

    for module in (plugins, suite, evaluation, sample, coldstart, decontam, proposer, train, serve, report):
        for command in module.commands():
            register(command)
