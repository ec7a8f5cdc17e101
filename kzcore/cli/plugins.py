"""`kz plugins`: the loaded plugins, the hooks each implements and what each registers."""

from __future__ import annotations

from kzcore.types import Command


def _cmd_plugins(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from kzcore.plugins import commands, executors, get_plugin_manager, languages, policies, suites

    pm = get_plugin_manager()
    registries = [languages(pm), executors(pm), policies(pm), suites(pm), commands(pm)]
    table = Table(title="kzcore plugins")
    for col in ("plugin", "hooks", "registers"):
        table.add_column(col)
    for name, plugin in pm.list_name_plugin():
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        regs = [f"{r.kind} {item}" for r in registries for item, owner in r.owners.items() if owner == name]
        table.add_row(name, ", ".join(hooks), ", ".join(regs))
    Console().print(table)
    return 0


def _configure(parser) -> None:
    parser.description = (
        "The plugins kz loaded (entry points of the 'kzcore' group and the built-ins), the hooks each "
        "implements, and the kernel languages, executors, policies and suites each registers."
    )


def commands() -> list[Command]:
    """`kz plugins`, as kzcore.builtins.commands registers it."""
    return [
        Command(
            name="plugins", run=_cmd_plugins, help="list loaded plugins, their hooks and what each registers",
            configure=_configure,
        )
    ]  # fmt: skip
