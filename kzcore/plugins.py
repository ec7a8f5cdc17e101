"""The plugin manager: entry-point loading, environment switches, the built-in defaults (registered last),
and the registries that collector hooks fill. Workers rebuild the same plugin set from `plugin_specs`.

Environment switches:
  KZ_LOAD_PLUGINS     comma list of entry-point names to load (empty string: load none)
  KZ_DISABLE_PLUGINS  comma list of entry-point names to skip
  KZ_TRACE_PLUGINS=1  print every hook call and result (pluggy's tracing)
  KZ_TEST_PLUGINS=1   also load the "kzcore.test" entry-point group: plugins that exist for kzcore's own tests
                      (the toy language kz_pylang), which a normal install should not show
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from kzcore import PROJECT, hookspecs
from kzcore.errors import KzError, UnknownLanguageError
from kzcore.language import Language

DEFAULT_PLUGINS = (
    "kzcore.builtins.languages",  # the per-language hooks ask the registered Language objects
    "kzcore.builtins.outputs",
    "kzcore.builtins.timing",
    "kzcore.builtins.prompting",
    "kzcore.builtins.registry",
    "kzcore.builtins.commands",  # kz's own commands
)

_pm: pluggy.PluginManager | None = None


def _env_list(name: str) -> list[str] | None:
    value = os.environ.get(name)
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def new_plugin_manager(load_entry_points: bool = True, extra: Iterable[str] = ()) -> pluggy.PluginManager:
    """A fresh manager: hook specs, then entry-point plugins (per the env switches), then ``extra``
    (importable ``module`` or ``module:attr`` specs), then the built-in defaults."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    if os.environ.get("KZ_TRACE_PLUGINS") == "1":
        pm.trace.root.setwriter(lambda s: sys.stderr.write(s))
        pm.enable_tracing()
    if load_entry_points:
        _load_entry_points(pm)
    for spec in extra:
        if pm.get_plugin(spec) is None:
            pm.register(import_spec(spec), name=spec)
    for name in DEFAULT_PLUGINS:
        if pm.get_plugin(name) is None:
            pm.register(_default_plugin(name, pm), name=name)
    pm.check_pending()
    return pm


def _default_plugin(name: str, pm: pluggy.PluginManager) -> Any:
    """A built-in plugin: the module, or what its ``for_manager(pm)`` gives (one bound to this manager)."""
    module = importlib.import_module(name)
    bind = getattr(module, "for_manager", None)
    return bind(pm) if bind is not None else module


TEST_GROUP = f"{PROJECT}.test"


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    only = _env_list("KZ_LOAD_PLUGINS")
    disabled = set(_env_list("KZ_DISABLE_PLUGINS") or [])
    groups = [PROJECT] + ([TEST_GROUP] if os.environ.get("KZ_TEST_PLUGINS") == "1" else [])
    for ep in (ep for group in groups for ep in importlib.metadata.entry_points(group=group)):
        if (only is not None and ep.name not in only) or ep.name in disabled:
            continue
        if pm.get_plugin(ep.name) is not None:
            continue
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken plugin must not take the whole tool down silently
            raise KzError(f"plugin {ep.name!r} ({ep.value}) failed to import: {exc}") from exc
        pm.register(plugin, name=ep.name)


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide manager, built on first use."""
    global _pm
    if _pm is None:
        _pm = new_plugin_manager()
    return _pm


def set_plugin_manager(pm: pluggy.PluginManager | None) -> None:
    """Replace the process-wide manager (tests; workers)."""
    global _pm
    _pm = pm


def import_spec(spec: str) -> Any:
    """``"pkg.mod"`` → the module; ``"pkg.mod:attr"`` → that module-level object."""
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


def plugin_specs(pm: pluggy.PluginManager) -> list[str]:
    """Importable specs for every registered plugin except the defaults, so a worker process can rebuild
    exactly this plugin set (entry-point plugins and ones a test registered by hand alike)."""
    specs = []
    for name, plugin in pm.list_name_plugin():
        if name in DEFAULT_PLUGINS or plugin is None:
            continue
        specs.append(_spec_of(name, plugin))
    return specs


def _spec_of(name: str, plugin: Any) -> str:
    if isinstance(plugin, ModuleType):
        return plugin.__name__
    module = sys.modules.get(getattr(type(plugin), "__module__", ""), None)
    if module is not None:
        for attr, value in vars(module).items():
            if value is plugin:
                return f"{module.__name__}:{attr}"
    raise KzError(f"plugin {name!r} is an object workers cannot re-create; register a module or a module-level object")


class Registry:
    """Name → object, filled by one collector hook."""

    def __init__(self, kind: str):
        self.kind = kind
        self.items: dict[str, Any] = {}
        self.owners: dict[str, str] = {}

    def get(self, name: str) -> Any:
        try:
            return self.items[name]
        except KeyError:
            installed = ", ".join(sorted(self.items)) or "none"
            raise KzError(f"no {self.kind} named {name!r}; installed: {installed}") from None


def collect(pm: pluggy.PluginManager, hook_name: str, kind: str) -> Registry:
    """Call ``kz_register_<kind>`` on each plugin separately, so the registry knows who registered what."""
    registry = Registry(kind)
    hook = getattr(pm.hook, hook_name)
    for impl in hook.get_hookimpls():
        owner = pm.get_name(impl.plugin) or repr(impl.plugin)

        def register(name_or_obj, obj=None, _owner=owner):
            name = name_or_obj.name if obj is None else name_or_obj
            value = name_or_obj if obj is None else obj
            if name in registry.items:  # never a silent override: the user must choose (KZ_DISABLE_PLUGINS)
                first = registry.owners[name]
                if first != _owner and {first, _owner} & set(DEFAULT_PLUGINS):  # the core's own: not replaceable
                    plugin = _owner if first in DEFAULT_PLUGINS else first
                    raise KzError(f"plugin {plugin!r} registers {kind} {name!r}, which is a built-in kz {kind}")
                who = f"twice by plugin {first!r}" if first == _owner else f"by plugins {first!r} and {_owner!r}"
                raise KzError(f"{kind} {name!r} is registered {who}; disable one (KZ_DISABLE_PLUGINS=NAME)")
            registry.items[name] = value
            registry.owners[name] = _owner

        impl.function(register=register)
    return registry


def languages(pm: pluggy.PluginManager | None = None) -> Registry:
    return collect(pm or get_plugin_manager(), "kz_register_languages", "language")


def executors(pm: pluggy.PluginManager | None = None) -> Registry:
    return collect(pm or get_plugin_manager(), "kz_register_executors", "executor")


def policies(pm: pluggy.PluginManager | None = None) -> Registry:
    return collect(pm or get_plugin_manager(), "kz_register_policies", "policy")


def commands(pm: pluggy.PluginManager | None = None) -> Registry:
    return collect(pm or get_plugin_manager(), "kz_register_commands", "command")


def suites(pm: pluggy.PluginManager | None = None) -> Registry:
    return collect(pm or get_plugin_manager(), "kz_register_suites", "suite")


def languages_of(specs: Iterable[str]) -> list[Language]:
    """The languages the plugin set ``specs`` (`plugin_specs`) registers: what a pool asks, in the process
    that starts its workers, for their environment and writable caches."""
    return list(languages(new_plugin_manager(load_entry_points=False, extra=specs)).items.values())


def require_language(name: str, pm: pluggy.PluginManager | None = None) -> Language:
    """The registered Language called ``name``, or UnknownLanguageError naming the installed ones."""
    registry = languages(pm)
    if name not in registry.items:
        installed = ", ".join(sorted(registry.items)) or "none"
        raise UnknownLanguageError(f"no plugin handles language {name!r}; installed languages: {installed}")
    return registry.items[name]


def suite_path(name: str, pm: pluggy.PluginManager | None = None) -> Path:
    return Path(suites(pm).get(name))
