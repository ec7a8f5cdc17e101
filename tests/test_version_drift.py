"""scripts/version_drift.py: the installed versions of the watched packages against constraints.txt."""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("version_drift", ROOT / "scripts" / "version_drift.py")
version_drift = importlib.util.module_from_spec(spec)
spec.loader.exec_module(version_drift)


def test_a_package_off_the_lock_is_named_and_a_local_build_tag_is_not_a_difference(tmp_path):
    pluggy = metadata.version("pluggy")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(
        "# a comment\n"
        f'pluggy=={pluggy}+cu130 ; python_version >= "3.11"\n'  # the same release, another build: no drift
        'Attrs==0.0.1 ; python_version >= "3.11"\n'  # names compare canonically
        "some_absent_package==1.0\n"
    )
    lock = version_drift.locked(constraints)
    assert lock == {"pluggy": f"{pluggy}+cu130", "attrs": "0.0.1", "some-absent-package": "1.0"}
    rows = {r[0]: r for r in version_drift.drift(["pluggy", "attrs", "some-absent-package", "unlocked"], lock)}
    assert rows["pluggy"][3] is False
    assert rows["attrs"] == ("attrs", metadata.version("attrs"), "0.0.1", True)
    assert rows["some-absent-package"] == ("some-absent-package", "-", "1.0", False)  # not installed: unknown
    assert rows["unlocked"][2] == "-" and rows["unlocked"][3] is False
    out = tmp_path / "versions.txt"
    assert version_drift.main(["attrs", "pluggy", "--constraints", str(constraints), "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0].endswith(" differs") and not lines[1].endswith(" differs")
    assert lines[-1] == "1 of 2 packages differ from constraints.txt"


def test_the_repository_lock_covers_the_watched_packages_it_installs():
    lock = version_drift.locked(ROOT / "constraints.txt")
    for name in ("torch", "triton", "transformers", "trl", "datasets", "gguf", "pluggy"):
        assert version_drift.canonical(name) in lock, name
