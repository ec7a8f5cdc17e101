"""The benches' one entry point (``python -m bench``, bench/__main__.py), their registry (bench/registry.py) and the
index of their results (bench/index.py, bench/results/INDEX.md). No bench runs here but the cheap profile_report;
listing them imports no bench module (nor torch)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
# modules of bench/ with a main that are commands of the entry point, not benches
COMMANDS = {"__main__", "summarize", "index"}


@pytest.fixture
def bench(monkeypatch):
    """The bench package, imported from the repository root as ``python -m bench`` imports it."""
    monkeypatch.syspath_prepend(str(ROOT))
    import bench

    return bench


def _python_m_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def _mains() -> dict[str, ast.FunctionDef]:
    """Each module of bench/ (not its subfolders) that defines a top-level ``main``, with that definition."""
    found = {}
    for path in sorted(BENCH_DIR.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "main":
                found[path.stem] = node
    return found


def test_every_bench_module_with_a_main_is_registered_and_takes_argv(bench):
    from bench import registry

    mains = _mains()
    assert set(mains) - COMMANDS == set(registry.BY_NAME), "a bench module without its row in registry.BENCHES?"
    for name, bench_ in registry.BY_NAME.items():
        assert bench_.path == BENCH_DIR / f"{name}.py"
        assert bench_.needs in registry.NEEDS and bench_.description and "\n" not in bench_.description
        assert [a.arg for a in mains[name].args.args] == ["argv"], f"{name}.main must take argv"


def test_a_bench_needs_one_of_the_known_kinds_of_machine(bench):
    from bench import registry

    with pytest.raises(ValueError):
        registry.Bench("x", "tpu", "no such machine")


def test_list_names_every_bench_with_its_needs_and_imports_no_bench(bench):
    from bench import registry

    done = _python_m_bench("list")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()}
    assert rows == {b.name: b.needs for b in registry.BENCHES}

    probe = (
        "import sys; from bench.__main__ import main; main(['list']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton') or m.startswith('bench.')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "['bench.__main__', 'bench.registry']"


def test_run_with_an_unknown_name_is_one_line_naming_the_known_ones_and_exit_2():
    done = _python_m_bench("run", "no_such_bench", "--out", "x.json")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert "unknown bench 'no_such_bench'" in done.stderr and "harness" in done.stderr and "timing" in done.stderr


def test_run_forwards_the_arguments_unchanged_and_returns_the_bench_exit_status(tmp_path):
    """profile_report: its usage names its file as ``python bench/profile_report.py`` did; its arguments reach it
    (an empty folder and a --match: its own message, exit 1)."""
    done = _python_m_bench("run", "profile_report", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: profile_report.py [-h] [--top TOP] [--match MATCH] [--callees CALLEES]")

    done = _python_m_bench("run", "profile_report", str(tmp_path), "--match", "Softmax", "--top", "3")
    assert done.returncode == 1
    assert done.stderr == f"no .pstats files in {tmp_path} matching 'Softmax'\n"

    done = _python_m_bench("run", "profile_report", str(tmp_path), "--no-such-option")
    assert done.returncode == 2 and "unrecognized arguments: --no-such-option" in done.stderr


def test_summarize_is_a_command_of_the_entry_point(tmp_path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"bench": "harness", "total_s": 1.23456, "results": [{"problem": "p"}]}))
    done = _python_m_bench("summarize", "--brief", str(report))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["# r.json", "bench: harness", "total_s: 1.2346"]


def test_the_committed_index_is_up_to_date(bench):
    """After adding result files: python -m bench index."""
    from bench import index

    assert index.main(["--check"]) == 0, "bench/results/INDEX.md is out of date: run python -m bench index"


def _rows(index_md: Path) -> list[list[str]]:
    lines = [line for line in index_md.read_text().splitlines() if re.match(r"\| \S", line)]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]  # past the header


def test_the_index_has_a_row_per_run_and_lists_an_unreadable_report(bench, tmp_path):
    from bench import index

    results = tmp_path / "results"
    results.mkdir()
    harness = {"bench": "harness", "summary": {"all": {"evals_per_min": 61.5}}, "results": []}
    (results / "2026-01-02-h200-s3-harness.json").write_text(json.dumps(harness))
    (results / "2026-01-02-h200-s3-harness.log").write_text("log\n")
    (results / "2026-01-02-h200-s3-broken.json").write_text('{"bench": "timing", ')
    (results / "2026-01-01-cpu-faults.json").write_text(json.dumps({"bench": "faults", "lost_results": 0}))
    (results / "2026-01-01-cpu-faults-2.json").write_text(json.dumps({"bench": "faults", "partial": True}))

    assert index.main(["--results", str(results)]) == 0
    rows = _rows(results / "INDEX.md")
    assert [row[:3] for row in rows] == [
        ["2026-01-01-cpu", "2026-01-01", "cpu"],
        ["2026-01-02-h200-s3", "2026-01-02", "h200"],
    ]
    assert rows[0][3] == "faults"
    assert rows[0][4] == "`faults-2.json`: (partial)<br>`faults.json`: lost_results=0"
    assert rows[1][3] == "harness"
    assert rows[1][4] == "`broken.json` (unreadable)<br>`harness.json`: all.evals_per_min=61.5"
    assert rows[1][5] == "1 .log"

    assert index.main(["--results", str(results), "--check"]) == 0
    (results / "2026-01-03-h200-s4-timing.json").write_text(json.dumps({"bench": "timing"}))
    assert index.main(["--results", str(results), "--check"]) == 1


def test_runs_sort_by_session_number(bench):
    from bench.index import Run

    runs = [Run(f"2026-01-01-h200-{s}", "2026-01-01", "h200", s) for s in ("s10", "s2", "")]
    assert [r.session for r in sorted(runs, key=Run.sort_key)] == ["", "s2", "s10"]


def test_gpu_check_runs_every_bench_through_the_entry_point(bench):
    from bench import registry

    text = (ROOT / "scripts" / "gpu-check").read_text()
    assert not re.findall(r"bench/\w+\.py", text), "gpu-check names a bench file: use $py -m bench run NAME"
    called = set(re.findall(r"\$py -m bench run ([a-z_]+)", text))
    assert called and called <= set(registry.BY_NAME)
    assert "$py -m bench summarize --brief" in text


def test_benches_import_their_siblings_through_the_package():
    """A bare ``from schedule import ...`` works only when bench/ itself is on sys.path (``python bench/X.py``),
    not under ``python -m bench``; imports inside functions count too."""
    siblings = {p.stem for p in BENCH_DIR.glob("*.py")}
    bare = []
    for path in sorted(BENCH_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            bare += [f"{path.name}:{node.lineno} {n}" for n in names if n and n.split(".")[0] in siblings]
    assert bare == []
