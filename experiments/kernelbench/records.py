"""The KernelBench runs' records as committed: small files only, JSONL over 32 KB gzipped, and a fork's files
that are byte for byte its origin's left out (every fork copies its origin's distillation, SFT model and SFT
held-out evaluation: megabytes a seed, and every GPU call carries the tracked tree). Readers find a file with
`located`, which looks in the run, then in the run it was forked from (``forked_from`` in its state.json).

    python experiments/kernelbench/records.py LEARN_TAR_GZ experiments/kernelbench/results/DATE-MACHINE

stores the runs in a GPU session's learn.tar.gz (scripts/gpu-train's `wait`) under DEST/runs/, replacing what an
earlier archive of the same runs left there."""

from __future__ import annotations

import argparse
import filecmp
import gzip
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kzcore.jsonl import stored, stored_glob  # noqa: E402

GZIP_OVER = 32 * 1024  # JSONL bigger than this is committed gzipped


def origin(run: Path) -> Path | None:
    """The run ``run`` was forked from, beside it (``forked_from`` names it relative to the tree the runs ran in,
    whose runs/ folder is ``run``'s parent), or None."""
    try:
        forked_from = json.loads((run / "state.json").read_text()).get("forked_from")
    except (OSError, ValueError):
        return None
    return run.parent / Path(forked_from).name if forked_from else None


def lineage(run: Path):
    """``run``, then the run it was forked from, and so on (each once)."""
    seen = set()
    where: Path | None = run
    while where is not None and where not in seen:
        seen.add(where)
        yield where
        where = origin(where)


def located(run: Path, rel: str) -> Path:
    """``run/rel`` (or its gzipped record); when the run lacks it, its origin's; else ``run/rel`` (missing)."""
    return next((path for where in lineage(run) if (path := stored(where / rel)).exists()), run / rel)


def located_glob(run: Path, folder: str, pattern: str) -> list[Path]:
    """`stored_glob` of ``run/folder``, or of the origin's when the run has none there."""
    return next((found for where in lineage(run) if (found := stored_glob(where / folder, pattern))), [])


def _gzip(path: Path) -> None:
    with path.open("rb") as src, gzip.GzipFile(path.with_name(path.name + ".gz"), "wb", 9, mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()


def store(archive: Path, dest: Path) -> list[str]:
    """The runs in ``archive`` under ``dest/runs/``, stored as the module says; returns the runs stored."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        runs = sorted(p for p in (Path(tmp) / "runs").iterdir() if p.is_dir())
        for run in runs:  # forks first lose what their origin holds the same, while both are whole
            parent = origin(run)
            if parent is None or not parent.is_dir():
                continue
            for path in sorted(p for p in run.rglob("*") if p.is_file()):
                twin = parent / path.relative_to(run)
                if path.name != "state.json" and twin.is_file() and filecmp.cmp(path, twin, shallow=False):
                    path.unlink()
        for run in runs:
            for path in run.rglob("*.jsonl"):
                if path.stat().st_size > GZIP_OVER:
                    _gzip(path)
            for folder in sorted((p for p in run.rglob("*") if p.is_dir()), reverse=True):
                if not any(folder.iterdir()):
                    folder.rmdir()
            target = dest / "runs" / run.name
            if target.exists():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(run, target)
        return [run.name for run in runs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive", type=Path, help="learn.tar.gz from scripts/gpu-train")
    parser.add_argument("dest", type=Path, help="experiments/kernelbench/results/DATE-MACHINE")
    args = parser.parse_args(argv)
    try:
        names = store(args.archive, args.dest)
    except (OSError, tarfile.TarError) as exc:
        print(f"records: {args.archive}: {exc}", file=sys.stderr)
        return 1
    print(f"stored {', '.join(names) or 'no runs'} under {args.dest / 'runs'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
