"""`kz`: the command line. Thin: parse arguments, call the library, print. Errors the user can fix end as
one line on stderr and a non-zero exit; results already filed are never lost.

Every command, kz's own and a plugin's, is a `Command` registered through ``kz_register_commands``: the
built-in ones by the default plugin `kzcore.builtins.commands`, each declared and run by its module here
(`suite`, `evaluation`, `sample`, `coldstart`, `train`, `proposer`, `decontam`, `report`, `serve`,
`plugins`); `options` holds what several of them share. This module builds the parser and dispatches."""

from __future__ import annotations

import argparse
import logging
import sys
import warnings

from kzcore.cli.options import HelpFormatter, Parser, UsageError, _add_eval_args, _config_from
from kzcore.errors import KzError, Terminated, sigterm_raises

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "KNOWN_WARNINGS",
    "HelpFormatter",
    "Parser",
    "UsageError",
    "_add_eval_args",
    "_config_from",
    "build_parser",
    "main",
    "quiet_known_warnings",
]

EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 130, 143


def build_parser(pm=None) -> argparse.ArgumentParser:
    """kz's argument parser: a subcommand for each command registered on ``pm`` (``kz_register_commands``),
    the built-in ones first; the built-in ones alone when ``pm`` is None."""
    from kzcore.plugins import commands, new_plugin_manager

    parser = Parser(prog="kz", description="Evaluate and train LLMs that write GPU kernels.")
    sub = parser.add_subparsers(dest="command", required=True)
    registry = commands(pm if pm is not None else new_plugin_manager(load_entry_points=False))
    for name, command in registry.items.items():
        command_parser = sub.add_parser(name, help=command.help, description=command.help or None)
        if command.configure is not None:
            command.configure(command_parser)
        command_parser.set_defaults(func=command.run)
    return parser


# Warnings libraries raise about what our code does knowingly: (message regex, category, module regex).
# Each is narrow, so any other warning, and every error, still shows.
KNOWN_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # TRL's SFT/GRPO configs (and GRPOSettings) pass `gradient_checkpointing`, which transformers 5 renamed to
    # `activation_checkpointing` and maps over itself: nothing to act on in a run's log
    ("`gradient_checkpointing(_kwargs)?` is deprecated", FutureWarning, r"transformers\.training_args"),
    # TRL's GRPOTrainer asks the model through the old names at every step (the demo's log had one per step)
    ("`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated", FutureWarning, r"transformers\.modeling_utils"),
)


def quiet_known_warnings() -> None:
    """Ignore the `KNOWN_WARNINGS`, and only those."""
    for message, category, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


class _StderrWarnings(logging.Handler):
    """kzcore's logged warnings (skipped lines of a results file, ...) as `kz: warning: ...` lines; writes to
    the sys.stderr of the moment, so tests capturing stderr see them."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"kz: warning: {record.getMessage()}", file=sys.stderr)


def _show_warnings() -> None:
    logger = logging.getLogger("kzcore")
    if not any(isinstance(h, _StderrWarnings) for h in logger.handlers):
        logger.addHandler(_StderrWarnings(logging.WARNING))
    logger.setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    from kzcore.plugins import get_plugin_manager

    try:
        parser = build_parser(get_plugin_manager())
    except KzError as exc:  # a broken plugin, or two plugins claiming one name
        print(f"kz: error: {exc}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    _show_warnings()
    quiet_known_warnings()
    try:
        with sigterm_raises():
            return args.func(args)
    except UsageError as exc:
        print(f"kz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KzError as exc:
        print(f"kz: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # the one place every command's Ctrl-C (or SIGTERM) ends: one line
        how, code = (
            ("terminated", EXIT_TERMINATED) if isinstance(exc, Terminated) else ("interrupted", EXIT_INTERRUPTED)
        )
        print(f"kz: {how}: {getattr(args, 'saved', '') or 'nothing was saved'}", file=sys.stderr)
        return code
