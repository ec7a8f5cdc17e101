"""KernelBench's own problem files (tests/data/kernelbench, unmodified: no KZ_SIZES): loading them by name
(from a checkout, from kz_suites' vendored copy, from the dataset), the size profiles derived for them (small on a CPU, a second shape everywhere), and the evaluator on the
degenerate ones, where a kernel that writes zeros or a constant must never count as correct."""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import pytest

from kz_suites import KERNELBENCH_COPY
from kzcore.cli import main
from kzcore.errors import ProblemFormatError
from kzcore.evaluate import sizes
from kzcore.evaluate.runner import evaluate
from kzcore.metrics import summarize
from kzcore.plugins import new_plugin_manager, set_plugin_manager
from kzcore.problems import import_module_from_file, load_problems
from kzcore.types import Candidate, EvalConfig, Status
from tests.test_cli_subprocess import error_line, kz

DATA = Path(__file__).resolve().parent / "data"
CHECKOUT = DATA / "kernelbench"
LEVEL1 = CHECKOUT / "KernelBench" / "level1"
CANDIDATES = DATA / "kernelbench_candidates"
CONFIG = EvalConfig(device="cpu", trials=2, timeout_s=120)


@pytest.fixture
def without_kz_suites(monkeypatch):
    """No checkout and a plugin manager without kz_suites: nothing registers the suite ``kernelbench``."""
    monkeypatch.delenv("KZ_KERNELBENCH", raising=False)
    set_plugin_manager(new_plugin_manager(load_entry_points=False))


@pytest.fixture
def no_datasets(without_kz_suites, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError


# ------------------------------------------------------------------------------------------------------
# loading by name
# ------------------------------------------------------------------------------------------------------


def test_kernelbench_levels_from_a_checkout(monkeypatch, tmp_path):
    """A checkout wins over kz_suites' copy (registered on this test's plugin manager): a user's newer one."""
    monkeypatch.setenv("KZ_KERNELBENCH", str(CHECKOUT))  # the repository root: KernelBench/levelN inside
    problems = load_problems("kernelbench:1")
    assert [p.name for p in problems] == ["19_ReLU", "23_Softmax", "90_cumprod"]
    assert {p.level for p in problems} == {1} and {p.suite for p in problems} == {"kernelbench"}
    both = load_problems("kernelbench:2,3", kernelbench=str(CHECKOUT / "KernelBench"))  # or its KernelBench/
    assert [p.key for p in both] == [
        "level2/80_Gemm_Max_Subtract_GELU",
        "level2/83_Conv3d_GroupNorm_Min_Clamp_Dropout",
        "level3/1_MLP",
    ]
    assert len(load_problems("kernelbench")) == 6
    monkeypatch.setenv("KZ_KERNELBENCH", str(tmp_path / "no-such-dir"))
    assert len(load_problems("kernelbench:1", kernelbench=str(CHECKOUT))) == 3  # --kernelbench over the variable
    with pytest.raises(ProblemFormatError, match="no such directory"):  # a wrong variable: no silent fallback
        load_problems("kernelbench:1")


def test_kernelbench_without_a_checkout_is_the_vendored_copy(monkeypatch):
    """kz_suites registers its copy of levels 1 and 2 as the suite ``kernelbench``: the default checkout."""
    monkeypatch.delenv("KZ_KERNELBENCH", raising=False)
    level1 = load_problems("kernelbench:1")
    assert len(level1) == 100 and {p.level for p in level1} == {1} and {p.suite for p in level1} == {"kernelbench"}
    assert {Path(p.path).parent for p in level1} == {KERNELBENCH_COPY / "level1"}
    assert (level1[0].name, level1[-1].name) == ("1_Square_matrix_multiplication_", "100_HingeLoss")
    both = load_problems("kernelbench")  # no levels: the two the copy holds, not a missing level 3
    assert len(both) == 200 and [p.level for p in both] == [1] * 100 + [2] * 100
    with pytest.raises(ProblemFormatError, match=r"has no level3/"):
        load_problems("kernelbench:3")
    assert (KERNELBENCH_COPY.parent / "LICENSE").read_text().startswith("MIT License")


def test_kernelbench_rejects_levels_it_does_not_have(monkeypatch):
    monkeypatch.setenv("KZ_KERNELBENCH", str(CHECKOUT))
    with pytest.raises(ProblemFormatError, match="levels 1-3"):
        load_problems("kernelbench:4")


def test_missing_checkout_is_a_one_line_error_naming_the_variable(no_datasets, capsys):
    assert main(["suite", "show", "kernelbench:1"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "KZ_KERNELBENCH" in err and "datasets" in err
    assert main(["suite", "show", "kernelbench:1", "--kernelbench", "/no/such/dir"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "/no/such/dir" in err and "no such directory" in err


def test_offline_dataset_fetch_fails_with_a_one_line_error(without_kz_suites, monkeypatch, capsys):
    fake = types.ModuleType("datasets")

    def load_dataset(name):
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)\nmore lines")

    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    assert main(["suite", "show", "kernelbench:2"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "KZ_KERNELBENCH" in err and "ConnectionError" in err


NO_CHECKOUT = (
    "kz: error: kernelbench: no local checkout "
    "(set KZ_KERNELBENCH=/path/to/KernelBench (a checkout), pass --kernelbench PATH "
    "or install kz_suites (plugins/suites: a copy of levels 1 and 2))"
)


def test_kz_without_a_checkout_reads_the_vendored_copy():
    """`kz` as a user runs it on a fresh clone: no checkout, installed plugins (kz_suites among them) loaded;
    KZ_* variables are not passed on (the kz helper)."""
    proc = kz("suite", "show", "kernelbench:1")
    assert proc.returncode == 0, proc.stderr
    assert "1_Square_matrix_multiplication_" in proc.stdout and "100_HingeLoss" in proc.stdout
    listed = kz("suite", "list")
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if " kernelbench " in line]
    assert "level1: 100, level2: 100" in row


def test_kz_without_a_checkout_or_the_datasets_package(tmp_path):
    """`kz` without kz_suites (disabled) and without a checkout, and `import datasets` fails (a package of that
    name that raises, first on the path)."""
    blocker = tmp_path / "blocked" / "datasets"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("datasets is blocked for this test")\n')
    out = tmp_path / "r.jsonl"
    args = ["eval", "--problems", "kernelbench:1", "--solutions", str(tmp_path), "--out", str(out)]
    proc = kz(*args, PYTHONPATH=str(blocker.parent), KZ_DISABLE_PLUGINS="suites")
    assert proc.returncode == 1
    assert error_line(proc) == (
        f"{NO_CHECKOUT}; the `datasets` package that would fetch ScalingIntelligence/KernelBench is not installed"
    )
    assert not out.exists()
    missing = kz("suite", "show", "kernelbench:1", "--kernelbench", str(tmp_path / "no-such-dir"))
    assert missing.returncode == 1
    assert error_line(missing) == (
        f"kz: error: KernelBench checkout '{tmp_path / 'no-such-dir'}' (KZ_KERNELBENCH or --kernelbench): "
        "no such directory"
    )


def test_kz_without_a_checkout_offline(tmp_path):
    """Without kz_suites: the datasets package is there but the hub cannot be reached (offline, nothing cached)."""
    pytest.importorskip("datasets")
    offline = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    offline["KZ_DISABLE_PLUGINS"] = "suites"
    proc = kz("suite", "show", "kernelbench:1", **offline)
    assert proc.returncode == 1
    line = error_line(proc)
    assert line.startswith(f"{NO_CHECKOUT} and fetching ScalingIntelligence/KernelBench failed (")
    assert line.endswith(")") and "Error" in line.split("failed (")[1]  # the exception's type


def test_kz_on_a_level_kernelbench_does_not_have(tmp_path):
    for extra in ([], ["--kernelbench", str(CHECKOUT)]):  # no checkout needed to know KernelBench's levels
        proc = kz("suite", "show", "kernelbench:2,4", *extra)
        assert proc.returncode == 1
        assert error_line(proc) == "kz: error: suite 'kernelbench' has no level 4; its levels: 1, 2, 3"
    proc = kz("suite", "show", "kernelbench:3")  # KernelBench has a level 3, kz_suites' copy does not
    assert proc.returncode == 1
    assert error_line(proc) == f"kz: error: KernelBench checkout '{KERNELBENCH_COPY}' has no level3/"
    partial = tmp_path / "kb"  # a checkout holding level 1 only
    shutil.copytree(LEVEL1, partial / "level1")
    proc = kz("eval", "--problems", "kernelbench:2", "--kernelbench", str(partial), "--solutions", str(tmp_path))
    assert proc.returncode == 1
    assert error_line(proc) == f"kz: error: KernelBench checkout '{partial}' has no level2/"


def test_dataset_rows_become_problems(without_kz_suites, monkeypatch):
    """The `datasets` path, with the hub's split/column layout (level_N; code, name, problem_id)."""
    fake = types.ModuleType("datasets")
    code = (LEVEL1 / "23_Softmax.py").read_text()
    fake.load_dataset = lambda name: {"level_1": [{"code": code, "name": "23_Softmax", "problem_id": 23}]}
    monkeypatch.setitem(sys.modules, "datasets", fake)
    (problem,) = load_problems("kernelbench:1")
    assert (problem.key, problem.source, problem.suite) == ("level1/23_Softmax", code, "kernelbench")


def test_kz_eval_takes_kernelbench_path(plugins, tmp_path, capsys, monkeypatch):
    plugins("kz_triton")
    monkeypatch.delenv("KZ_KERNELBENCH", raising=False)
    code = main(["eval", "--problems", "kernelbench:1", "--kernelbench", str(CHECKOUT), "--solutions", str(tmp_path)])
    assert code != 0  # no candidates in an empty directory: but the problems were found
    assert "for 3 problem(s)" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------
# derived size profiles
# ------------------------------------------------------------------------------------------------------


def _module(path: Path, tag: str):
    return import_module_from_file(path, f"kz_test_kb_{tag}_{path.stem}")


@pytest.mark.parametrize("path", sorted(CHECKOUT.rglob("level*/*.py")), ids=lambda p: p.stem)
def test_derived_profiles_are_small_distinct_and_run(path):
    """Each vendored file gets a small profile and an alt one that differs in every size it changes, keeps
    multiples of 16, and on which the reference itself runs."""
    import torch

    full = _module(path, "full")
    small = _module(path, "small")
    alt = _module(path, "alt")
    assert sizes.apply_profile(small, "small") == ("small" + sizes.DERIVED, "")
    assert sizes.apply_profile(alt, "alt") == ("alt" + sizes.DERIVED, "")
    outputs = []
    for module in (small, alt):
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        assert sum(x.numel() for x in inputs) <= 2**20  # the full sizes hold up to 1.6e9 elements
        with torch.no_grad():
            outputs.append(model(*inputs))
    assert outputs[0].shape != outputs[1].shape
    changed = [n for n in vars(full) if isinstance(getattr(full, n), int) and getattr(full, n) != getattr(small, n)]
    assert changed
    for name in changed:
        if getattr(full, name) % 16 == 0:
            assert getattr(small, name) % 16 == 0 and getattr(alt, name) % 16 == 0, name


def test_no_size_constant_means_no_derived_profile(tmp_path):
    source = (
        "import torch\nfrom torch import nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return x * 2\n\ndef get_inputs():\n    return [torch.rand(8, 8)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    values, why = sizes.derive_profile(source, "alt")
    assert values == {} and "no integer size constant" in why


def test_dependent_constants_follow_the_ones_they_are_computed_from():
    source = (
        "import torch\nbatch = 4096\nhidden = batch * 2\nshape = (batch, 3)\n\nclass Model:\n    pass\n\n"
        "def get_inputs():\n    return [torch.rand(batch, hidden), torch.rand(*shape)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    small, _ = sizes.derive_profile(source, "small")
    assert small["hidden"] == 2 * small["batch"] and small["shape"] == (small["batch"], 3)
    assert small["batch"] < 4096


# ------------------------------------------------------------------------------------------------------
# the evaluator on unmodified KernelBench files
# ------------------------------------------------------------------------------------------------------


def _candidate(problem, source: str, sample: int) -> Candidate:
    return Candidate(problem=problem.name, language="triton", level=problem.level, sample=sample, source=source)


def _fill(output: str, fill: str) -> str:
    text = (CANDIDATES / "fill.py").read_text()
    return text.replace('OUTPUT = "same"', f'OUTPUT = "{output}"').replace('FILL = "zero"', f'FILL = "{fill}"')


DEGENERATE = {  # problem -> (output shape kind, the constant fills tried besides zeros)
    "23_Softmax": ("same", "inverse_row"),
    "90_cumprod": ("same", "half"),
    "80_Gemm_Max_Subtract_GELU": ("row", "half"),
    "83_Conv3d_GroupNorm_Min_Clamp_Dropout": ("conv3", "half"),
}


def test_zeros_and_constant_kernels_never_count_on_degenerate_kernelbench_problems(
    plugins, tmp_path, monkeypatch, own_workers
):
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("kernelbench:1,2", pm=pm, kernelbench=str(CHECKOUT)) if p.name in DEGENERATE]
    candidates = []
    for p in problems:
        output, constant = DEGENERATE[p.name]
        candidates += [_candidate(p, _fill(output, "zero"), 0), _candidate(p, _fill(output, constant), 1)]
    results = evaluate(problems, candidates, CONFIG, tmp_path / "r.jsonl", workers=1, pm=pm)
    by = {(r.problem, r.sample): r for r in results}
    assert len(by) == 8
    for r in results:
        assert not r.correct or r.problem_degenerate, (r.problem, r.sample, r.status, r.message)
    # softmax rows of ~1/192: zeros and 1/192 are within atol elementwise, but not in norm
    for sample in (0, 1):
        result = by[("23_Softmax", sample)]
        assert result.status is Status.INCORRECT and "norm" in result.message, result.message
    # cumprod's rows decay to ~0, but their first elements do not (at this size and at full size)
    assert by[("90_cumprod", 0)].status is Status.INCORRECT and by[("90_cumprod", 1)].status is Status.INCORRECT
    # 80 and 83 output exact zeros for every input: no output check can tell, the problem check does
    for name in ("80_Gemm_Max_Subtract_GELU", "83_Conv3d_GroupNorm_Min_Clamp_Dropout"):
        assert by[(name, 0)].problem_degenerate and "~0" in by[(name, 0)].problem_degenerate
    # 192-wide rows, every output ~0.005 < atol: zeros pass elementwise, but not the norm check candidates meet,
    # so the problem counts (a zeros kernel on it is refused above)
    assert not by[("23_Softmax", 0)].problem_degenerate
    assert all(r.size == "small" + sizes.DERIVED for r in results)
    table = summarize(results, k=1)
    assert table["all"]["pass@k"] == 0.0
    assert table["all"]["excluded_degenerate"] == 2  # 80 and 83
    assert table["all"]["problems"] == 4 - table["all"]["excluded_degenerate"]
    included = summarize(results, k=1, include_degenerate=True)["all"]
    assert included["problems"] == 4 and included["excluded_degenerate"] == 0 and included["correct"] >= 2
    # the problem checks are cached on disk: a second run reads its verdict from there
    cached = sorted((tmp_path / "cache" / "problem-checks").glob("*.json"))
    assert len(cached) == 4
    for path in cached:
        path.write_text(path.read_text().replace('"reason": "', '"reason": "cached: '))
    zero = [p for p in problems if p.name == "80_Gemm_Max_Subtract_GELU"]
    first = next(c for c in candidates if c.problem == zero[0].name)
    (again,) = evaluate(zero, [first], CONFIG, tmp_path / "r2.jsonl", workers=1, pm=pm)
    assert again.problem_degenerate.startswith("cached: ")


def test_a_kernel_with_the_tested_shape_hard_coded_fails_on_an_unmodified_kernelbench_file(
    plugins, tmp_path, monkeypatch, own_workers
):
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    pm = plugins("kz_triton")
    (relu,) = [p for p in load_problems("kernelbench:1", pm=pm, kernelbench=str(CHECKOUT)) if p.name == "19_ReLU"]
    assert "KZ_SIZES" not in relu.source
    good = _candidate(relu, (CANDIDATES / "relu.py").read_text(), 0)
    fixed = _candidate(relu, (CANDIDATES / "relu_fixed_shape.py").read_text(), 1)
    results = {r.sample: r for r in evaluate([relu], [good, fixed], CONFIG, tmp_path / "r.jsonl", workers=1, pm=pm)}
    assert results[0].status is Status.CORRECT, results[0].message
    assert results[0].second_shape == "alt" + sizes.DERIVED and not results[0].problem_degenerate
    assert results[1].status is Status.INCORRECT
    assert results[1].message.startswith("second shape (derived 'alt' profile, batch_size=144, dim=208)")
    without = evaluate(
        [relu], [fixed], EvalConfig(device="cpu", trials=2, second_shape=""), tmp_path / "r2.jsonl", workers=1, pm=pm
    )
    assert without[0].status is Status.CORRECT  # what KernelBench files got before: nothing caught it
