"""Print a short summary of a bench JSON file: its scalar fields and summary dicts, then one line per result.

python -m bench summarize bench/results/2026-11-29-h200-harness-l1-final.json
python -m bench summarize --stages harness.json   # one line per result: status, e2e and stages >= 10 ms
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


def stage_lines(path: Path) -> list[str]:
    """Each result's problem, status, end-to-end seconds and the stages that took 10 ms or more, then the
    summaries' stage medians in full (the brief form cuts long lines)."""
    data = json.loads(path.read_text())
    lines = [f"# {path.name}"]
    for row in data.get("results", []):
        stages = " ".join(f"{k}={v:.3f}" for k, v in sorted(row.get("stages", {}).items()) if v >= 0.01)
        lines.append(f"{row.get('problem')} {row.get('status')} e2e={row.get('e2e_s')} {stages}")
    for level, summary in (data.get("summary") or {}).items():
        if summary.get("candidates"):
            medians = " ".join(f"{k}={v:.3f}" for k, v in summary.get("stage_median_s", {}).items() if v >= 0.001)
            lines.append(
                f"{level}: median e2e {summary.get('e2e_median_s')} p90 {summary.get('e2e_p90_s')} | {medians}"
            )
    return lines


def main(argv: list[str]) -> int:
    brief = "--brief" in argv
    if "--stages" in argv:
        for name in (a for a in argv if not a.startswith("--")):
            print("\n".join(stage_lines(Path(name))))
        return 0
    names = [a for a in argv if a != "--brief"]
    if not names:
        print("usage: python -m bench summarize [--brief] FILE.json [...]", file=sys.stderr)
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
