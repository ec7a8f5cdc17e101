"""KernelBench-format problems and candidate solutions: loading from a file, a `levelN/` directory, JSONL
or a registered suite, and importing a problem module at a chosen size profile (inside workers)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType

from kzcore.errors import ProblemFormatError
from kzcore.jsonl import read_jsonl_numbered
from kzcore.language import import_module_from_file  # noqa: F401 (importable from here too)
from kzcore.types import Candidate, Problem

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
_LEVEL_DIR = re.compile(r"^level[_-]?(\d+)$")


def check_problem_source(source: str, where: str) -> None:
    """Raise ProblemFormatError unless ``source`` parses and defines Model, get_inputs, get_init_inputs."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProblemFormatError(f"{where}: not valid Python (line {exc.lineno}: {exc.msg})") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [name for name in REQUIRED if name not in defined]
    if missing:
        raise ProblemFormatError(f"{where}: not a KernelBench problem, missing {', '.join(missing)}")


def _level_of(path: Path, default: int) -> int:
    for part in reversed(path.parts[:-1]):
        m = _LEVEL_DIR.match(part)
        if m:
            return int(m.group(1))
    return default


def load_problem_file(path: Path, level: int | None = None, suite: str = "") -> Problem:
    source = path.read_text()
    check_problem_source(source, str(path))
    return Problem(
        name=path.stem,
        source=source,
        level=level if level is not None else _level_of(path, 0),
        path=str(path),
        suite=suite,
    )


def load_problem_dir(root: Path, levels: set[int] | None = None, suite: str = "") -> list[Problem]:
    """A KernelBench `level1/`-style directory (files directly in it), or a directory holding `levelN/`
    subdirectories. `solutions/` subtrees are skipped."""
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    level_dirs = sorted(d for d in root.iterdir() if d.is_dir() and _LEVEL_DIR.match(d.name))
    problems = [load_problem_file(f, suite=suite) for f in files]
    for d in level_dirs:
        problems += [load_problem_file(f, suite=suite) for f in sorted(d.glob("*.py")) if not f.name.startswith("_")]
    if levels:
        problems = [p for p in problems if p.level in levels]
    if not problems:
        raise ProblemFormatError(f"{root}: no problem files (*.py) found")
    return sorted(problems, key=_natural_key)


def _natural_key(p: Problem):
    m = re.match(r"(\d+)", p.name)
    return (p.level, int(m.group(1)) if m else 1 << 30, p.name)


def _count(row: dict, key: str, default: int, where: str) -> int:
    """``row[key]`` as a non-negative integer (a JSON integer, or a string of digits), else ``default``."""
    value = row.get(key, default)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProblemFormatError(f"{where}: '{key}' must be a non-negative integer, not {value!r}")
    return value


def load_problem_jsonl(path: Path) -> list[Problem]:
    """One problem per line: {"name": ..., "code": ..., "level": optional int}."""

    def reject(where: str, why: str) -> ProblemFormatError:
        return ProblemFormatError(f"{where}: expected a JSON object with 'name' and 'code' ({why})")

    problems = []
    for lineno, row in read_jsonl_numbered(path, reject):
        where = f"{path}:{lineno}"
        if "name" not in row or "code" not in row:
            raise reject(where, f"missing {', '.join(repr(k) for k in ('name', 'code') if k not in row)}")
        name, code = row["name"], row["code"]
        if not isinstance(code, str):
            raise ProblemFormatError(f"{where}: 'code' must be a string")
        check_problem_source(code, where)
        problems.append(
            Problem(name=str(name), source=code, level=_count(row, "level", 0, where), path=None, suite=path.stem)
        )
    if not problems:
        raise ProblemFormatError(f"{path}: no problems")
    return problems


def parse_suite_spec(spec: str) -> tuple[str, set[int] | None]:
    """``"builtin:1,2"`` → ("builtin", {1, 2})."""
    name, _, levels = spec.partition(":")
    if not levels:
        return name, None
    try:
        return name, {int(x) for x in levels.split(",")}
    except ValueError:
        raise ProblemFormatError(f"{spec!r}: levels must be integers, e.g. builtin:1 or builtin:1,2") from None


def load_problems(spec: str, pm=None, kernelbench: str | None = None) -> list[Problem]:
    """Problems from a path (file, directory, .jsonl), a registered suite name (``builtin[:levels]``), or
    ``kernelbench[:levels]`` (`load_kernelbench`; ``kernelbench`` is its checkout, else $KZ_KERNELBENCH, else
    the folder a plugin registers as the suite ``kernelbench``: kz_suites ships a copy of levels 1 and 2)."""
    from kzcore.plugins import suites

    path = Path(spec)
    if path.exists():
        if path.is_dir():
            return load_problem_dir(path, suite=path.name)
        if path.suffix == ".jsonl":
            return load_problem_jsonl(path)
        return [load_problem_file(path)]
    name, levels = parse_suite_spec(spec)
    registry = suites(pm)
    if name == KERNELBENCH:  # KernelBench's rules (levels 1-3, *_OLD skipped) whoever supplies the files
        return load_kernelbench(levels, kernelbench, registered=registry.items.get(KERNELBENCH))
    if name not in registry.items:
        known = ", ".join(sorted(registry.items)) or "none"
        raise ProblemFormatError(
            f"{spec!r} is neither a path nor a suite (suites: {known}); KernelBench: {KERNELBENCH}[:levels]"
        )
    return load_problem_dir(Path(registry.items[name]), levels=levels, suite=name)


# ----------------------------------------------------------------------------------------------------
# KernelBench by name
# ----------------------------------------------------------------------------------------------------

KERNELBENCH = "kernelbench"
KERNELBENCH_ENV = "KZ_KERNELBENCH"
KERNELBENCH_LEVELS = (1, 2, 3)
KERNELBENCH_DATASET = "ScalingIntelligence/KernelBench"  # on the Hugging Face hub: splits level_1, level_2, ...
_NO_CHECKOUT = (
    f"set {KERNELBENCH_ENV}=/path/to/KernelBench (a checkout), pass --kernelbench PATH "
    "or install kz_suites (plugins/suites: a copy of levels 1 and 2)"
)


def kernelbench_root(checkout: str | Path) -> Path:
    """The folder holding ``level1/``… of a KernelBench checkout: ``checkout`` itself or its
    ``KernelBench/`` subfolder (the repository root)."""
    root = Path(checkout).expanduser()
    if not root.is_dir():
        raise ProblemFormatError(
            f"KernelBench checkout {str(root)!r} ({KERNELBENCH_ENV} or --kernelbench): no such directory"
        )
    for candidate in (root / "KernelBench", root):
        if (candidate / "level1").is_dir():
            return candidate
    raise ProblemFormatError(f"KernelBench checkout {str(root)!r}: no level1/ in it or in its KernelBench/ folder")


def load_kernelbench(
    levels: set[int] | None = None, checkout: str | Path | None = None, registered: str | Path | None = None
) -> list[Problem]:
    """KernelBench's levels 1-3 (or ``levels``) from a local checkout: ``checkout``, else $KZ_KERNELBENCH,
    else ``registered`` (the folder a plugin registers as the suite ``kernelbench``), so that a user's own
    (newer) checkout wins over a packaged copy. With none of the three, from its published dataset through
    the ``datasets`` package (needs the network). Without ``levels``, a checkout gives every level it holds.
    Superseded files (``*_OLD.py``) are skipped."""
    import os

    unknown = sorted(set(levels or ()) - set(KERNELBENCH_LEVELS))
    if unknown:
        raise ProblemFormatError(f"kernelbench: level(s) {unknown} not supported (levels 1-3)")
    checkout = checkout or os.environ.get(KERNELBENCH_ENV) or registered
    if not checkout:
        return _kernelbench_from_dataset(set(levels or KERNELBENCH_LEVELS))
    root = kernelbench_root(checkout)
    levels = levels or {n for n in KERNELBENCH_LEVELS if (root / f"level{n}").is_dir()}
    problems = []
    for level in sorted(levels):
        folder = root / f"level{level}"
        if not folder.is_dir():
            raise ProblemFormatError(f"KernelBench checkout {str(root)!r} has no level{level}/")
        files = sorted(f for f in folder.glob("*.py") if not f.name.startswith("_") and not f.stem.endswith("_OLD"))
        problems += [load_problem_file(f, level=level, suite=KERNELBENCH) for f in files]
    if not problems:
        raise ProblemFormatError(f"KernelBench checkout {str(root)!r}: no problem files in level(s) {sorted(levels)}")
    return sorted(problems, key=_natural_key)


def _kernelbench_from_dataset(levels: set[int]) -> list[Problem]:
    try:
        import datasets
    except ImportError:
        raise ProblemFormatError(
            f"kernelbench: no local checkout ({_NO_CHECKOUT}); the `datasets` package that "
            f"would fetch {KERNELBENCH_DATASET} is not installed"
        ) from None
    try:
        dataset = datasets.load_dataset(KERNELBENCH_DATASET)
        rows = [(level, row) for level in sorted(levels) for row in dataset[f"level_{level}"]]
    except Exception as exc:  # offline, hub errors, a changed layout: all mean "use a checkout"
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ProblemFormatError(
            f"kernelbench: no local checkout ({_NO_CHECKOUT}) and fetching {KERNELBENCH_DATASET} failed "
            f"({type(exc).__name__}: {first})"
        ) from None
    problems = []
    for level, row in rows:
        name = str(row["name"])
        if not re.match(r"\d+_", name) and row.get("problem_id") is not None:
            name = f"{row['problem_id']}_{name}"
        check_problem_source(row["code"], f"{KERNELBENCH_DATASET} level_{level}/{name}")
        problems.append(Problem(name=name, source=row["code"], level=level, path=None, suite=KERNELBENCH))
    return sorted(problems, key=_natural_key)


# ----------------------------------------------------------------------------------------------------
# solutions
# ----------------------------------------------------------------------------------------------------


def load_solutions(spec: str, problems: list[Problem], language: str, pm=None) -> list[Candidate]:
    """Candidates for ``problems`` from a directory (``[levelN/]NAME.py`` or ``[levelN/]NAME/*.py``, one
    sample per file), a JSONL file (``problem``, ``code`` or ``completion``, optional ``level``,
    ``sample``, ``language``), or a suite's own ``solutions/<language>/`` tree (``builtin``)."""
    from kzcore.plugins import suites

    path = Path(spec)
    if path.is_file():
        return _solutions_from_jsonl(path, problems, language)
    if not path.is_dir():
        registry = suites(pm)
        if spec not in registry.items:
            raise ProblemFormatError(f"--solutions {spec!r}: no such file or directory, and not a suite")
        path = Path(registry.items[spec]) / "solutions" / language
        if not path.is_dir():
            raise ProblemFormatError(f"suite {spec!r} ships no {language} solutions ({path} missing)")
    candidates = []
    for p in problems:
        for base in (path / f"level{p.level}", path):
            files = (
                [base / f"{p.name}.py"] if (base / f"{p.name}.py").is_file() else sorted((base / p.name).glob("*.py"))
            )
            if files:
                for sample, f in enumerate(files):
                    candidates.append(
                        Candidate(
                            problem=p.name,
                            language=language,
                            level=p.level,
                            sample=sample,
                            source=f.read_text(),
                            origin=str(f),
                        )
                    )
                break
    return candidates


def _solutions_from_jsonl(path: Path, problems: list[Problem], language: str) -> list[Candidate]:
    def reject(where: str, why: str) -> ProblemFormatError:
        return ProblemFormatError(f"{where}: expected a JSON object with 'problem' ({why})")

    levels = {p.name: p.level for p in problems}
    out, seen = [], {}
    for lineno, row in read_jsonl_numbered(path, reject):
        if "problem" not in row:
            raise reject(f"{path}:{lineno}", "missing 'problem'")
        name = str(row["problem"])
        if name not in levels:
            continue
        where = f"{path}:{lineno}"
        text = [k for k in ("code", "completion") if k in row]
        if len(text) != 1:
            raise ProblemFormatError(f"{where}: needs exactly one of 'code' or 'completion'")
        (kind,) = text
        row_language = row.get("language", language)
        for key, value in ((kind, row[kind]), ("language", row_language)):
            if not isinstance(value, str):
                raise ProblemFormatError(f"{where}: '{key}' must be a string")
        sample = _count(row, "sample", seen.get(name, 0), where)
        seen[name] = sample + 1
        out.append(
            Candidate(
                problem=name,
                language=row_language,
                level=_count(row, "level", levels[name], where),
                sample=sample,
                source=row[kind] if kind == "code" else None,
                completion=row[kind] if kind == "completion" else None,
                origin=f"{path}:{lineno}",
            )
        )
    return out


# ----------------------------------------------------------------------------------------------------
# importing (workers only: runs the problem's module code)
# ----------------------------------------------------------------------------------------------------


def apply_size_profile(module: ModuleType, profile: str) -> str:
    """Override the module constants named by ``KZ_SIZES[profile]``; returns the profile actually used
    ("full" when the problem has no such profile)."""
    if profile == "full":
        return "full"
    sizes = getattr(module, "KZ_SIZES", {}).get(profile)
    if sizes is None:
        return "full"
    for key, value in sizes.items():
        if not hasattr(module, key):
            raise ProblemFormatError(f"KZ_SIZES[{profile!r}] names {key!r}, which is not a module constant")
        setattr(module, key, value)
    return profile
