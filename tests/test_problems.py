"""Loading problems (KernelBench directories, levelN trees, JSONL, registered suites), size profiles, and
loading solutions (directories, JSONL, a suite's own solutions)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kz_suites import BUILTIN_SUITE
from kzcore.errors import ProblemFormatError
from kzcore.problems import apply_size_profile, import_module_from_file, load_problems, load_solutions
from kzcore.types import Problem

BUILTIN = BUILTIN_SUITE

# Verbatim KernelBench level-1 layout: constants after the class, no KZ_SIZES.
KB_FOO = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Simple model that performs a single square matrix multiplication (C = A * B)
    """
    def __init__(self):
        super(Model, self).__init__()
    
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """
        Performs the matrix multiplication.
        """
        return torch.matmul(A, B)

N = 2048

def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]

def get_init_inputs():
    return []  # No special initialization inputs needed
'''

KB_BAR = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Simple model that performs a ReLU activation.
    """
    def __init__(self):
        super(Model, self).__init__()
    
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

batch_size = 16
dim = 16384

def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]

def get_init_inputs():
    return []  # No special initialization inputs needed
'''

SIZED = KB_BAR + '\n\nKZ_SIZES = {"small": {"batch_size": 2, "dim": 8}, "bad": {"nope": 1}}\n'


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------------------------------
# problems
# ----------------------------------------------------------------------------------------------------


def test_kernelbench_level_dir_loads_unchanged(tmp_path):
    level1 = tmp_path / "KernelBench" / "level1"
    write(level1 / "1_Foo.py", KB_FOO)
    write(level1 / "2_Bar.py", KB_BAR)
    problems = load_problems(str(level1))
    assert [(p.name, p.level) for p in problems] == [("1_Foo", 1), ("2_Bar", 1)]
    assert [p.source for p in problems] == [KB_FOO, KB_BAR]
    assert [p.path for p in problems] == [str(level1 / "1_Foo.py"), str(level1 / "2_Bar.py")]
    assert problems[0].key == "level1/1_Foo"


def test_directory_of_level_subdirs(tmp_path):
    write(tmp_path / "level1" / "2_Bar.py", KB_BAR)
    write(tmp_path / "level1" / "10_Baz.py", KB_BAR)  # natural order: 2 before 10
    write(tmp_path / "level1" / "1_Foo.py", KB_FOO)
    write(tmp_path / "level2" / "1_Fused.py", KB_FOO)
    write(tmp_path / "level1" / "__init__.py", "")  # underscore files are not problems
    write(tmp_path / "solutions" / "triton" / "level1" / "1_Foo.py", "not a problem")  # skipped
    problems = load_problems(str(tmp_path))
    assert [p.key for p in problems] == ["level1/1_Foo", "level1/2_Bar", "level1/10_Baz", "level2/1_Fused"]
    assert {p.suite for p in problems} == {tmp_path.name}


def test_single_problem_file(tmp_path):
    path = write(tmp_path / "level3" / "7_Net.py", KB_FOO)
    (problem,) = load_problems(str(path))
    assert (problem.name, problem.level, problem.source) == ("7_Net", 3, KB_FOO)


def test_jsonl_problems(tmp_path):
    path = tmp_path / "probs.jsonl"
    path.write_text(
        json.dumps({"name": "a", "code": KB_FOO, "level": 2})
        + "\n\n"
        + json.dumps({"name": "b", "code": KB_BAR})
        + "\n"
    )
    problems = load_problems(str(path))
    assert [(p.name, p.level, p.source, p.suite, p.path) for p in problems] == [
        ("a", 2, KB_FOO, "probs", None),
        ("b", 0, KB_BAR, "probs", None),
    ]


def test_builtin_level_selection():
    level2 = load_problems("builtin:2")
    assert level2 and {p.level for p in level2} == {2}
    assert {p.name for p in level2} == {f.stem for f in (BUILTIN / "level2").glob("*.py")}
    assert all(p.suite == "builtin" for p in level2)
    both = load_problems("builtin:1,2")
    assert len(both) == len(load_problems("builtin")) == len(level2) + len(load_problems("builtin:1"))


def test_missing_get_inputs(tmp_path):
    path = write(tmp_path / "level1" / "1_Foo.py", KB_FOO.replace("def get_inputs", "def make_inputs"))
    with pytest.raises(ProblemFormatError) as info:
        load_problems(str(tmp_path))
    assert str(info.value) == f"{path}: not a KernelBench problem, missing get_inputs"


def test_syntax_error(tmp_path):
    path = write(tmp_path / "1_Foo.py", KB_FOO.replace("return torch.matmul(A, B)", "return torch.matmul(A, B"))
    with pytest.raises(ProblemFormatError, match=r"1_Foo\.py: not valid Python \(line \d+: "):
        load_problems(str(path))


def test_bad_jsonl_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"name": "a", "code": KB_FOO}) + "\n{not json\n")
    with pytest.raises(ProblemFormatError, match=r"p\.jsonl:2: expected a JSON object with 'name' and 'code'"):
        load_problems(str(path))
    path.write_text(json.dumps({"name": "a"}) + "\n")
    with pytest.raises(ProblemFormatError, match=r"p\.jsonl:1: expected a JSON object"):
        load_problems(str(path))
    path.write_text(json.dumps({"name": "a", "code": "x = 1\n"}) + "\n")
    with pytest.raises(ProblemFormatError, match=r"p\.jsonl:1: not a KernelBench problem, missing Model, get_inputs"):
        load_problems(str(path))
    path.write_text(json.dumps({"name": "a", "code": 7}) + "\n")
    with pytest.raises(ProblemFormatError, match=r"p\.jsonl:1: 'code' must be a string$"):
        load_problems(str(path))
    path.write_text(json.dumps({"name": "a", "code": KB_FOO, "level": "one"}) + "\n")
    with pytest.raises(ProblemFormatError, match=r"p\.jsonl:1: 'level' must be a non-negative integer, not 'one'$"):
        load_problems(str(path))


def test_unknown_suite():
    with pytest.raises(
        ProblemFormatError, match=r"'nosuch' is neither a path nor a suite \(suites: builtin, kernelbench\)"
    ):
        load_problems("nosuch")
    with pytest.raises(ProblemFormatError, match="levels must be integers"):
        load_problems("builtin:one")


def test_empty_directory(tmp_path):
    with pytest.raises(ProblemFormatError, match="no problem files"):
        load_problems(str(tmp_path))


def test_apply_size_profile(tmp_path):
    path = write(tmp_path / "sized.py", SIZED)
    module = import_module_from_file(path, "kz_test_sized_problem")
    assert apply_size_profile(module, "full") == "full"
    assert tuple(module.get_inputs()[0].shape) == (16, 16384)
    assert apply_size_profile(module, "tiny") == "full"  # unknown profile: the problem's own size
    assert tuple(module.get_inputs()[0].shape) == (16, 16384)
    assert apply_size_profile(module, "small") == "small"
    assert (module.batch_size, module.dim) == (2, 8)
    assert tuple(module.get_inputs()[0].shape) == (2, 8)  # get_inputs reads the constants at call time
    with pytest.raises(ProblemFormatError, match="KZ_SIZES\\['bad'\\] names 'nope'"):
        apply_size_profile(module, "bad")


def test_apply_size_profile_without_kz_sizes(tmp_path):
    module = import_module_from_file(write(tmp_path / "kb.py", KB_BAR), "kz_test_kb_problem")
    assert apply_size_profile(module, "small") == "full"
    assert module.dim == 16384


# ----------------------------------------------------------------------------------------------------
# solutions
# ----------------------------------------------------------------------------------------------------


def _problems() -> list[Problem]:
    return [Problem(name="1_Foo", source=KB_FOO, level=1), Problem(name="2_Bar", source=KB_BAR, level=2)]


def test_load_solutions_from_dir(tmp_path):
    write(tmp_path / "level1" / "1_Foo.py", "foo level1")
    write(tmp_path / "1_Foo.py", "foo flat (shadowed by level1/)")
    write(tmp_path / "2_Bar" / "a.py", "bar sample a")  # one sample per file
    write(tmp_path / "2_Bar" / "b.py", "bar sample b")
    cands = load_solutions(str(tmp_path), _problems(), "triton")
    assert [(c.problem, c.level, c.sample, c.source, c.language) for c in cands] == [
        ("1_Foo", 1, 0, "foo level1", "triton"),
        ("2_Bar", 2, 0, "bar sample a", "triton"),
        ("2_Bar", 2, 1, "bar sample b", "triton"),
    ]
    assert cands[0].origin == str(tmp_path / "level1" / "1_Foo.py")
    assert all(c.completion is None for c in cands)


def test_load_solutions_from_jsonl(tmp_path):
    path = tmp_path / "sols.jsonl"
    rows = [
        {"problem": "1_Foo", "code": "code 0"},
        {"problem": "1_Foo", "completion": "```python\ncode 1\n```"},
        {"problem": "2_Bar", "completion": "text", "sample": 7, "language": "python"},
        {"problem": "9_Unknown", "code": "ignored: no such problem"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cands = load_solutions(str(path), _problems(), "triton")
    assert [(c.problem, c.level, c.sample, c.language, c.source, c.completion) for c in cands] == [
        ("1_Foo", 1, 0, "triton", "code 0", None),
        ("1_Foo", 1, 1, "triton", None, "```python\ncode 1\n```"),
        ("2_Bar", 2, 7, "python", None, "text"),
    ]
    assert cands[1].origin == f"{path}:2"
    path.write_text(json.dumps({"problem": "1_Foo", "code": "a", "completion": "b"}) + "\n")
    with pytest.raises(ProblemFormatError, match=r"sols\.jsonl:1: needs exactly one of 'code' or 'completion'"):
        load_solutions(str(path), _problems(), "triton")
    path.write_text("[1, 2]\n")
    with pytest.raises(ProblemFormatError, match=r"sols\.jsonl:1: expected a JSON object with 'problem'"):
        load_solutions(str(path), _problems(), "triton")
    for row, why in (
        ({"problem": "1_Foo", "code": "a", "sample": "abc"}, "'sample' must be a non-negative integer, not 'abc'"),
        ({"problem": "1_Foo", "code": "a", "sample": -1}, "'sample' must be a non-negative integer, not -1"),
        ({"problem": "1_Foo", "code": "a", "level": 1.5}, "'level' must be a non-negative integer, not 1.5"),
        ({"problem": "1_Foo", "code": 3}, "'code' must be a string"),
        ({"problem": "1_Foo", "completion": "x", "language": 2}, "'language' must be a string"),
    ):
        path.write_text(json.dumps({"problem": "1_Foo", "code": "ok"}) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(ProblemFormatError, match=rf"sols\.jsonl:2: {re.escape(why)}$"):
            load_solutions(str(path), _problems(), "triton")
    path.write_text(json.dumps({"problem": "1_Foo", "code": "a", "sample": "3"}) + "\n")
    assert load_solutions(str(path), _problems(), "triton")[0].sample == 3  # digits in a string, as before


def test_load_solutions_builtin():
    problems = load_problems("builtin")
    cands = load_solutions("builtin", problems, "triton")
    assert len(cands) == len(problems)
    for p, c in zip(problems, cands):
        f = BUILTIN / "solutions" / "triton" / f"level{p.level}" / f"{p.name}.py"
        assert (c.problem, c.level, c.sample, c.language, c.origin) == (p.name, p.level, 0, "triton", str(f))
        assert c.source == f.read_text()


def test_load_solutions_errors(tmp_path):
    with pytest.raises(ProblemFormatError, match="suite 'builtin' ships no nolang solutions"):
        load_solutions("builtin", _problems(), "nolang")
    with pytest.raises(ProblemFormatError, match="no such file or directory, and not a suite"):
        load_solutions(str(tmp_path / "missing"), _problems(), "triton")
