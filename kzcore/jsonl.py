"""JSON Lines files, the one way every kind kzcore writes (results, completions, pools, logs) is read and
appended. Writers flush whole lines, so the only damage an interrupted run leaves is a torn last line:
readers skip it, appenders cut it off first, and both say so instead of dropping it silently.

Records kept for the long run (committed experiments) may be stored gzipped: a reader asked for ``X.jsonl``
reads ``X.jsonl.gz`` when only that exists (`stored`), and `stored_glob` finds both. Appenders write plain
files only: a gzipped file is a finished record.

API:
  read_jsonl(path, *, on_skip=None) -> list[dict]   every JSON-object line, in order
  stored(path) -> Path                              path, or path + ".gz" when only that exists
  stored_glob(folder, pattern) -> list[Path]        the files matching pattern, plain or gzipped, each once
  read_jsonl_numbered(path, reject) -> [(line, row)] the same with line numbers; a bad line raises reject(...)
  repair_tail(path, *, on_skip=None) -> bool        make the file end on a whole line before appending
  open_for_append(path, *, on_skip=None) -> file    repair_tail, then a text file opened to append
  append_jsonl(path, rows, *, on_skip=None) -> None one line per row, flushed
  write_text_atomic(path, text) -> None             replace a whole file (a pool, a state, a report) at once

``on_skip(message)`` receives one line per skipped or dropped line, ``"PATH:LINE: why"``; without it the
message goes to the ``kzcore.jsonl`` logger as a warning (`kz` prints those on stderr).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

OnSkip = Callable[[str], None]

log = logging.getLogger(__name__)


def _report(on_skip: OnSkip | None, message: str) -> None:
    if on_skip is None:
        log.warning(message)
    else:
        on_skip(message)


def _object(line: str) -> dict | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def stored(path: Path | str) -> Path:
    """``path``, or ``path`` with ".gz" added when only that exists (a record committed gzipped)."""
    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    return packed if not path.exists() and packed.exists() else path


def stored_glob(folder: Path | str, pattern: str) -> list[Path]:
    """The files in ``folder`` matching ``pattern`` or ``pattern`` + ".gz", sorted by their plain name, each
    once (the plain file when both exist); read each with `read_jsonl`."""
    found: dict[str, Path] = {}
    for path in Path(folder).glob(pattern + ".gz"):
        found[path.name[: -len(".gz")]] = path
    for path in Path(folder).glob(pattern):
        found[path.name] = path
    return [found[name] for name in sorted(found)]


def _scan(path: Path) -> list[tuple[int, str, dict | None, bool]]:
    """(line number, text, the JSON object or None, torn) for every non-blank line of ``path`` (gunzipped when
    its name ends in .gz); torn: the last line, without its newline, and not a JSON object (a write cut short)."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    lines = data.decode("utf-8", errors="replace").split("\n")
    out = []
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            row = _object(line)
            out.append((lineno, line, row, row is None and lineno == len(lines)))
    return out


def _torn_message(path: Path, lineno: int, line: str) -> str:
    return f"{path}:{lineno}: torn last line skipped ({len(line)} characters, no newline)"


def read_jsonl(path: Path | str, *, on_skip: OnSkip | None = None) -> list[dict]:
    """Every line of ``path`` that holds a JSON object, in file order; [] when the file does not exist.

    Blank lines are ignored. A last line without its newline that does not parse is a torn write and is
    skipped; any other line that is not a JSON object is skipped too. Each skip is reported with its
    file and line number through ``on_skip``. ``path`` may be gzipped (`stored`)."""
    path = stored(path)
    if not path.exists():
        return []
    rows = []
    for lineno, line, row, torn in _scan(path):
        if row is not None:
            rows.append(row)
        elif torn:
            _report(on_skip, _torn_message(path, lineno, line))
        else:
            _report(on_skip, f"{path}:{lineno}: not a JSON object, skipped: {line[:60]!r}")
    return rows


def read_jsonl_numbered(
    path: Path | str, reject: Callable[[str, str], Exception], *, on_skip: OnSkip | None = None
) -> list[tuple[int, dict]]:
    """(line number, row) for every JSON-object line, for readers whose messages name the line (JSONL
    problems and solutions, the task pool, SFT rows: files a person may have written). A torn last line is
    skipped and reported as in ``read_jsonl``; any other line that is not a JSON object raises
    ``reject(where, why)`` (``where``: ``"PATH:LINE"``). A missing file raises FileNotFoundError."""
    path = Path(path)
    out = []
    for lineno, line, row, torn in _scan(path):
        if row is not None:
            out.append((lineno, row))
        elif torn:
            _report(on_skip, _torn_message(path, lineno, line))
        else:
            raise reject(f"{path}:{lineno}", _not_an_object(line))
    return out


def _not_an_object(line: str) -> str:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        return str(exc)
    return f"a JSON {type(value).__name__}, not an object"


def repair_tail(path: Path | str, *, on_skip: OnSkip | None = None) -> bool:
    """Make ``path`` end with a newline so that appended lines start on a line of their own. A last line
    without its newline is completed when it is a whole JSON object, else cut off (reported through
    ``on_skip``). True when the file was changed; a missing or empty file is left alone."""
    path = Path(path)
    if not path.exists():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    keep = data.rfind(b"\n") + 1  # 0 when the file is one unfinished line
    tail = data[keep:]
    with path.open("r+b") as f:
        if _object(tail.decode("utf-8", errors="replace")) is not None:
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
            return True
        f.truncate(keep)
    lineno = data.count(b"\n") + 1
    _report(on_skip, f"{path}:{lineno}: torn last line dropped before appending ({len(tail)} bytes, no newline)")
    return True


def open_for_append(path: Path | str, *, on_skip: OnSkip | None = None) -> IO[str]:
    """``repair_tail(path)``, then ``path`` opened to append text (parent directories created). A ``path``
    stored gzipped (`stored`) is a finished record: appending beside it would hide it from readers, so it is
    refused."""
    path = Path(path)
    if stored(path) != path:
        raise ValueError(f"{path}: only {path.name}.gz exists, a finished record; unpack it to append to it")
    path.parent.mkdir(parents=True, exist_ok=True)
    repair_tail(path, on_skip=on_skip)
    return path.open("a")


def append_jsonl(path: Path | str, rows: Iterable[dict], *, on_skip: OnSkip | None = None) -> None:
    """Append one line per row to ``path`` (tail repaired first) and flush."""
    with open_for_append(path, on_skip=on_skip) as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.flush()


def write_text_atomic(path: Path | str, text: str) -> None:
    """``text`` as the whole of ``path`` (its folder made if missing), through a temporary file beside it and
    os.replace: a reader, or a kill in the middle of the write, finds the previous file or the new one, never
    half of one. The file is readable by all (0644), as a plain write would leave it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make the file private to its writer
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
