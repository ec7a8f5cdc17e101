"""The slow rule (root conftest.py): a test is marked `slow` at collection when it requests one of SLOW_FIXTURES,
directly, through another fixture or through `usefixtures`; each of those fixtures is defined once, in a
conftest.py, with a docstring saying why it is slow; and a hand-written slow mark is left only where no fixture
can decide, in the files listed here with their count and why."""

from __future__ import annotations

import ast
import re
from pathlib import Path

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parent.parent
TEST_DIRS = [ROOT / "tests", *sorted((ROOT / "plugins").glob("*/tests"))]
# file -> (hand slow marks it carries, why they stay)
HAND_MARKS = {
    "tests/test_faults.py": (1, "the network test picks its pool at run time (request.getfixturevalue)"),
}
HAND_MARK = re.compile(r"\bmark\.slow\b")

PROBE = """
import pytest


@pytest.fixture(scope="module")
def pool(own_workers):
    return "a pool"


def test_plain(tmp_path):
    pass


def test_direct(timeout_wait):
    pass


def test_through_a_fixture(pool):
    pass


@pytest.mark.usefixtures("training")
def test_through_usefixtures():
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_parametrized(n, native_build):
    pass
"""


def collected(result) -> set[str]:
    return {line.split("::", 1)[1] for line in result.outlines if line.startswith("test_probe.py::")}


def test_requesting_a_slow_fixture_marks_a_test_slow_at_collection(pytester):
    pytester.makeconftest((ROOT / "conftest.py").read_text())  # the rule as the suite runs it
    pytester.makeini("[pytest]\nmarkers =\n    slow: seconds each\n    gpu: needs a CUDA GPU\n")
    pytester.makepyfile(test_probe=PROBE)
    slow = pytester.runpytest("--collect-only", "-q", "-m", "slow", "-p", "no:cacheprovider")
    fast = pytester.runpytest("--collect-only", "-q", "-m", "not slow", "-p", "no:cacheprovider")
    assert collected(slow) == {
        "test_direct",
        "test_through_a_fixture",
        "test_through_usefixtures",
        "test_parametrized[1]",
        "test_parametrized[2]",
    }, slow.outlines
    assert collected(fast) == {"test_plain"}, fast.outlines


def fixtures_defined(path: Path) -> dict[str, str | None]:
    """The fixtures a file defines (functions decorated with pytest.fixture), each with its docstring."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            "fixture" in ast.unparse(decorator) for decorator in node.decorator_list
        ):
            found[node.name] = ast.get_docstring(node)
    return found


def test_every_slow_fixture_is_defined_once_in_a_conftest_with_a_one_line_docstring(request):
    slow_fixtures = request.config.pluginmanager.get_plugin(str(ROOT / "conftest.py")).SLOW_FIXTURES
    files = [ROOT / "conftest.py", *(path for folder in TEST_DIRS for path in sorted(folder.rglob("*.py")))]
    defined: dict[str, list[tuple[str, str | None]]] = {}
    for path in files:
        for name, doc in fixtures_defined(path).items():
            defined.setdefault(name, []).append((str(path.relative_to(ROOT)), doc))
    assert len(set(slow_fixtures)) == len(slow_fixtures) >= 5
    for name in slow_fixtures:
        # once: a test module's fixture of the same name would shadow it and leave its tests unmarked
        (where, doc), *others = defined.get(name) or [("nowhere", None)]
        assert not others, f"slow fixture {name!r} is defined in {where} and {[w for w, _ in others]}"
        assert where.endswith("conftest.py"), f"slow fixture {name!r} is defined in {where}, not a conftest.py"
        assert doc and len(doc.splitlines()) == 1, f"slow fixture {name!r} needs a one-line docstring saying why"


def test_no_test_file_carries_a_hand_slow_mark_but_the_listed_ones():
    found = {}
    for folder in TEST_DIRS:
        for path in sorted(folder.rglob("*.py")):
            count = len(HAND_MARK.findall(path.read_text()))
            if count:
                found[str(path.relative_to(ROOT))] = count
    assert found == {path: count for path, (count, _why) in HAND_MARKS.items()}, (
        "a test is marked slow by the fixtures it requests (SLOW_FIXTURES in the root conftest.py): request the "
        "one that names what makes it slow; a hand mark no fixture can replace goes into HAND_MARKS, with why"
    )
