"""Which installed packages differ from the versions in constraints.txt, the ones the test suite ran with.

The GPU machine brings its own torch, transformers, triton and the rest (the set-up there installs kzcore with
--no-deps), so its versions can differ from the lock; a difference there once changed the embedded model's end
token. scripts/gpu-check and scripts/gpu-train setup print this beside their records.

    python scripts/version_drift.py [--constraints constraints.txt] [--out FILE] [PACKAGE ...]

Prints one line per package: ``name installed locked`` and ``differs`` where they differ (``-`` for a package not
installed or not locked). Exits 0 whatever it finds: drift is information, not an error.
"""

from __future__ import annotations

import argparse
import re
from importlib import metadata
from pathlib import Path

WATCHED = ("torch", "triton", "transformers", "tokenizers", "trl", "datasets", "accelerate", "gguf", "cupy-cuda13x",
           "cuda-python", "pluggy", "numpy")  # fmt: skip


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(constraints: Path) -> dict[str, str]:
    """name -> version of each ``name==version`` line of ``constraints`` (markers ignored)."""
    out = {}
    for line in constraints.read_text().splitlines():
        spec = line.split("#", 1)[0].split(";", 1)[0].strip()
        if "==" in spec:
            name, version = spec.split("==", 1)
            out[canonical(name)] = version.strip()
    return out


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def drift(packages, lock: dict[str, str]) -> list[tuple[str, str, str, bool]]:
    """(name, installed, locked, differs) per package; a local build tag (+cu130) is not a difference."""
    rows = []
    for name in packages:
        have, want = installed(name), lock.get(canonical(name))
        differs = bool(have and want and have.split("+", 1)[0] != want.split("+", 1)[0])
        rows.append((name, have or "-", want or "-", differs))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", default=list(WATCHED))
    parser.add_argument("--constraints", type=Path, default=Path(__file__).resolve().parent.parent / "constraints.txt")
    parser.add_argument("--out", type=Path, help="also write the lines here")
    args = parser.parse_args(argv)
    rows = drift(args.packages, locked(args.constraints))
    lines = [f"{name} {have} {want}" + (" differs" if differs else "") for name, have, want, differs in rows]
    n = sum(r[3] for r in rows)
    lines.append(f"{n} of {len(rows)} packages differ from {args.constraints.name}")
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
