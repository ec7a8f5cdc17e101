"""Inputs that used to crash with an error that did not say what was wrong."""

from __future__ import annotations

import ast
import types

import pytest

from kzcore.errors import KzError
from kzcore.evaluate.static import escape_violations
from kzcore.language import import_module_from_file
from kzcore.plugins import plugin_specs


def test_a_relative_import_is_checked_not_crashed_on():
    tree = ast.parse("from . import helpers\nfrom .. import x as y\nimport torch\n")
    assert escape_violations(tree) == []
    patched = ast.parse("from . import helpers\nhelpers.sync = lambda: None\n")
    assert any("monkey-patching" in v for v in escape_violations(patched))


def test_a_file_python_cannot_import_names_the_path(tmp_path):
    path = tmp_path / "candidate.txt"
    path.write_text("x = 1\n")
    with pytest.raises(ImportError, match=r"cannot import .*candidate\.txt: not a Python module file"):
        import_module_from_file(path, "kz_not_a_module")


def test_a_plugin_object_of_an_unimported_module_is_refused_by_name():
    from kzcore.plugins import new_plugin_manager

    cls = types.new_class("Orphan")
    cls.__module__ = "kz_module_that_was_never_imported"
    pm = new_plugin_manager(load_entry_points=False)
    pm.register(cls(), name="orphan")
    with pytest.raises(KzError, match="plugin 'orphan' is an object workers cannot re-create"):
        plugin_specs(pm)
