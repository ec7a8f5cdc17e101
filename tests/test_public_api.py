"""The public plugin API: what ``kzcore.__all__`` lists is what plugins may import, from ``kzcore`` itself.
The bundled plugins (and the toy test language, which plays a third-party plugin) import nothing else."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import kzcore

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_PACKAGES = sorted(ROOT.glob("plugins/*/kz_*")) + [ROOT / "tests" / "plugins" / "kz_pylang" / "kz_pylang"]


def test_every_public_name_resolves():
    for name in kzcore.__all__:
        assert getattr(kzcore, name) is not None, name
    assert set(kzcore.__all__) <= set(dir(kzcore))


def test_an_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="module 'kzcore' has no attribute 'Languag'"):
        kzcore.Languag  # noqa: B018


def test_plugins_import_only_the_public_api():
    offences = []
    for package in PLUGIN_PACKAGES:
        for path in package.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kzcore"):
                    if node.module != "kzcore":
                        offences.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import ...")
                    offences += [
                        f"{path.relative_to(ROOT)}:{node.lineno}: {a.name} is not in kzcore.__all__"
                        for a in node.names
                        if a.name not in kzcore.__all__
                    ]
                elif isinstance(node, ast.Import):
                    offences += [
                        f"{path.relative_to(ROOT)}:{node.lineno}: import {a.name}"
                        for a in node.names
                        if a.name.startswith("kzcore.")
                    ]
    assert len(PLUGIN_PACKAGES) >= 5
    assert offences == []


def test_importing_kzcore_loads_none_of_its_modules():
    """The API is lazy: `import kzcore` (every plugin's first line) costs pluggy, not torch or the evaluator."""
    code = "import sys, kzcore; print(sorted(m for m in sys.modules if m.startswith('kzcore.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
