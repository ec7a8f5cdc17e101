"""Write constraints.txt from the packages installed in this interpreter's environment (`make lock` runs it with
.venv's Python after upgrading the environment): the set-up installs with ``-c constraints.txt``, so a fresh clone
gets the versions the tests were run with, while pyproject.toml keeps ranges.

    .venv/bin/python scripts/lock.py constraints.txt

Editable installs (kzcore and its bundled plugins) are left out; torch's local build tag (``+cpu``, ``+cu130``)
is dropped so that the same line admits the CPU wheel and a CUDA build of that version. Each line carries the
environment marker ``python_version >= "X.Y"`` of the interpreter frozen: on an older Python (the project
supports 3.10, where several of these versions do not exist) pip resolves from pyproject.toml's ranges alone."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

HEADER = """\
# Versions the test suite ran with, frozen from .venv by `make lock` (scripts/lock.py; Python {python}, {machine}).
# The set-up installs with `-c constraints.txt`: a fresh clone gets these, not whatever is newest that day.
# Move it forward with `make lock` (the newest versions pyproject.toml's ranges allow), then `make test`.
# On a Python older than {python} the marker switches every line off, and pip resolves from the ranges alone.
"""


def frozen() -> list[str]:
    """``name==version`` of every installed, non-editable distribution, sorted by name, torch without its local
    build tag."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], check=True, capture_output=True, text=True
    ).stdout
    lines = []
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "==" not in line:
            continue  # comments, and direct references (name @ URL) that a constraints file cannot hold
        name, version = line.split("==", 1)
        if name.lower() == "torch":
            version = version.split("+", 1)[0]
        lines.append(f"{name}=={version}")
    return sorted(lines, key=lambda s: re.sub(r"[-_.]+", "-", s.lower()))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/lock.py constraints.txt", file=sys.stderr)
        return 2
    python = ".".join(platform.python_version_tuple()[:2])
    marker = f'python_version >= "{python}"'
    text = HEADER.format(python=python, machine=f"{platform.system().lower()} {platform.machine()}")
    text += "".join(f"{line} ; {marker}\n" for line in frozen())
    Path(argv[0]).write_text(text)
    print(f"{argv[0]}: {text.count(chr(10)) - HEADER.count(chr(10))} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
