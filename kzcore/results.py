"""Results files: JSONL, one run header (what produced the results) per invocation, then one line per
result, appended and flushed as each finishes so an interrupted run loses nothing and can resume."""

from __future__ import annotations

import json
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

from kzcore.jsonl import OnSkip, open_for_append, read_jsonl
from kzcore.types import SCHEMA, EvalConfig, EvalResult, from_json, to_json

TRACKED_PACKAGES = (
    "kzcore",
    "torch",
    "triton",
    "pluggy",
    "attrs",
    "numpy",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "cuda-python",
)


def package_versions() -> dict[str, str]:
    versions = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def run_header(config: EvalConfig, executor_info: dict, plugins: list[str], argv: list[str] | None = None) -> dict:
    return {
        "type": "run",
        "schema": SCHEMA,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "executor": executor_info,
        "plugins": plugins,
        "config": to_json(config),
        "argv": argv if argv is not None else sys.argv,
    }


def read_results(path: Path, *, on_skip: OnSkip | None = None) -> list[EvalResult]:
    """Every result line in ``path`` (headers skipped); a later line for the same key replaces an earlier
    one. A torn last line (the process was killed mid-write) and malformed lines are skipped and reported
    through ``on_skip`` (kzcore.jsonl)."""
    by_key: dict[str, EvalResult] = {}
    for row in read_jsonl(path, on_skip=on_skip):
        if row.get("type") == "result":
            result = from_json(EvalResult, row)
            by_key[result.key] = result
    return list(by_key.values())


def read_headers(path: Path, *, on_skip: OnSkip | None = None) -> list[dict]:
    return [row for row in read_jsonl(path, on_skip=on_skip) if row.get("type") == "run"]


class ResultsWriter:
    """Appends JSONL lines and flushes each one. A torn last line left by a killed run is cut off first
    (with a warning), so the new header starts on a line of its own."""

    def __init__(self, path: Path, *, on_skip: OnSkip | None = None):
        self.path = path
        self.file = open_for_append(path, on_skip=on_skip)

    def write_header(self, header: dict) -> None:
        self._write(header)

    def write(self, result: EvalResult) -> None:
        self._write({"type": "result", **to_json(result)})

    def _write(self, row: dict) -> None:
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
