"""Print a short summary of a bench JSON file: its scalar fields and summary dicts, then one line per result.

python bench/summarize.py bench/results/2026-11-29-h200-harness-l1-final.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _short(value, depth: int = 0):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict) and depth < 2:
        return {k: _short(v, depth + 1) for k, v in value.items() if not isinstance(v, list)}
    if isinstance(value, list):
        return f"[{len(value)} items]"
    return value


def summarize(path: Path, brief: bool = False) -> list[str]:
    """Scalars and summary dicts (each line cut to 400 characters), then one line per result (not brief)."""
    data = json.loads(path.read_text())
    lines = [f"# {path.name}"]
    for key, value in data.items():
        if key in ("results", "environment", "versions", "packages", "runs"):
            continue
        lines.append(f"{key}: {_short(value)}"[:400])
    for row in [] if brief else data.get("results", [])[:60]:
        if isinstance(row, dict):
            lines.append("  " + " ".join(f"{k}={_short(v)}" for k, v in row.items() if not isinstance(v, (dict, list))))
    return lines


def main(argv: list[str]) -> int:
    brief = "--brief" in argv
    names = [a for a in argv if a != "--brief"]
    if not names:
        print("usage: python bench/summarize.py [--brief] FILE.json [...]", file=sys.stderr)
        return 2
    for name in names:
        try:
            print("\n".join(summarize(Path(name), brief)))
        except (OSError, ValueError) as error:
            print(f"{name}: cannot summarize: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
