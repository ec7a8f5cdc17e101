"""Results files: JSONL, one run header (what produced the results) per invocation, then one line per
result, appended and flushed as each finishes so an interrupted run loses nothing and can resume. A result
judges the code named by its ``code_hash``; a ``stale`` line retracts one whose code has since changed."""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from kzcore.jsonl import OnSkip, open_for_append, read_jsonl
from kzcore.types import SCHEMA, EvalConfig, EvalResult, from_json, to_json

# distributions every run header records; each language adds its own (`Language.tracked_packages`)
CORE_PACKAGES = ("kzcore", "torch", "pluggy", "attrs", "numpy")
STALE = "stale"  # the "type" of a line retracting an earlier result (`ResultsWriter.write_stale`)


def tracked_packages(pm=None) -> tuple[str, ...]:
    """The core's packages, then those of every language ``pm`` (default: the process's manager) registers."""
    from kzcore.language import tracked_packages as of_languages
    from kzcore.plugins import languages

    return tuple(dict.fromkeys(CORE_PACKAGES + of_languages(languages(pm).items.values())))


def package_versions(pm=None) -> dict[str, str]:
    """Installed version of each of `tracked_packages`; one not installed is left out."""
    versions = {}
    for name in tracked_packages(pm):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def run_header(
    config: EvalConfig, executor_info: dict, plugins: list[str], argv: list[str] | None = None, pm=None
) -> dict:
    """What produced a results file: versions (of ``pm``'s languages' packages too), executor, plugins, config."""
    return {
        "type": "run",
        "schema": SCHEMA,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(pm),
        "executor": executor_info,
        "plugins": plugins,
        "config": to_json(config),
        "argv": argv if argv is not None else sys.argv,
    }


def read_results(path: Path, *, on_skip: OnSkip | None = None) -> list[EvalResult]:
    """Every result line in ``path`` (headers skipped); a later line for the same key replaces an earlier
    one, and a ``stale`` line (`ResultsWriter.write_stale`) drops the key's earlier result. A torn last line
    (the process was killed mid-write) and malformed lines are skipped and reported through ``on_skip``
    (kzcore.jsonl)."""
    by_key: dict[str, EvalResult] = {}
    for row in read_jsonl(path, on_skip=on_skip):
        if row.get("type") == "result":
            result = from_json(EvalResult, row)
            by_key[result.key] = result
        elif row.get("type") == STALE:
            by_key.pop(row.get("key"), None)
    return list(by_key.values())


def stale_results(saved: Iterable[EvalResult], code_hashes: dict[str, str]) -> list[EvalResult]:
    """The results of ``saved`` that judged other code than their candidate has now: ``code_hashes`` maps a
    result key to the `EvalJob.code_hash` of the candidate evaluated now (keys absent from it are not asked
    about). A result without a hash, from a file written before hashes were recorded, counts as stale:
    nothing says which code it judged, and evaluating again is the answer that cannot be wrong."""
    return [r for r in saved if r.key in code_hashes and r.code_hash != code_hashes[r.key]]


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

    def write_stale(self, result: EvalResult, code_hash: str) -> None:
        """Retract ``result``: its candidate's code (or its problem's source) is now ``code_hash``. The line
        stays in the file beside the verdict it retracts; readers drop that verdict, so a resumed run
        evaluates the candidate again and the new result takes its place."""
        row = {"type": STALE, "key": result.key, "status": result.status.value}
        self._write({**row, "code_hash": result.code_hash, "replaced_by": code_hash})

    def _write(self, row: dict) -> None:
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
