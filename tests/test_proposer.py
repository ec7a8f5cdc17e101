"""The Proposer: the API catalog, history-weighted API-set sampling, the prompt, the AST gate (alias-aware,
forbidden imports), dedup, the task pool, and propose() end to end with a scripted policy and a fake
sandboxed problem checker."""

from __future__ import annotations

import functools
import json
import random
from collections import Counter

import pytest
import torch

from kzcore.errors import KzError
from kzcore.policy import Completion
from kzcore.problems import load_problems
from kzcore.proposer import catalog as catalog_mod
from kzcore.proposer.catalog import Catalog, CatalogError, canonical_spelling, load_catalog
from kzcore.proposer.gates import GATE_ORDER, AstGateConfig, GateResult, check_ast, dedup_key, runtime_gates
from kzcore.proposer.pool import (
    PassRate,
    PoolError,
    TaskRecord,
    accepted_problems,
    append_records,
    pass_rate_histogram,
    read_pool,
    record_pass_rates,
    stats,
    to_hf_dataset,
)
from kzcore.proposer.prompt import build_proposer_prompt, choose_examples, load_examples, prompt_hash
from kzcore.proposer.propose import ProposerError, extract_module, propose
from kzcore.proposer.sampler import SamplerConfig, SamplerError, api_weights, failed_api_sets, sample_api_sets
from kzcore.types import EvalConfig, ProblemReport


@functools.cache
def builtin_catalog() -> Catalog:
    return load_catalog()


# ----------------------------------------------------------------------------------------------------
# scripted modules
# ----------------------------------------------------------------------------------------------------

VALID = '''"""Conv2d followed by ReLU."""

import torch
import torch.nn as nn

batch_size = 16
in_channels = 64
out_channels = 128
size = 128


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(y)


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels]


KZ_SIZES = {"small": {"batch_size": 2, "in_channels": 3, "out_channels": 4, "size": 9}}
'''

# VALID with other variable, attribute and import names, a comment, other whitespace and no docstring.
VALID_RENAMED = """import torch
from torch import nn as tnn

N = 16
CIN = 64
COUT   = 128
HW = 128

class Model( tnn.Module ):

    def __init__(self, cin, cout):
        super().__init__()
        # the only layer
        self.layer = tnn.Conv2d(cin, cout, kernel_size=3, padding=1)

    def forward(self, inp):
        out = self.layer(inp)
        return torch.relu(out)

def get_inputs():
    return [torch.randn(N, CIN, HW, HW)]

def get_init_inputs():
    return [CIN, COUT]

KZ_SIZES = {'small': {'N': 2, 'CIN': 3, 'COUT': 4, 'HW': 9}}
"""

# Same request (Conv2d), reached through the functional spelling: an alias of the same API.
ALIAS_FUNCTIONAL = """import torch
import torch.nn.functional as F
from torch import nn

batch_size = 8
channels = 32
size = 64


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, channels, 3, 3) * 0.05)

    def forward(self, x):
        return F.gelu(F.conv2d(x, self.weight, padding=1))


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return [channels]


KZ_SIZES = {"small": {"batch_size": 2, "channels": 3, "size": 8}}
"""

DEGENERATE = VALID.replace("return torch.relu(y)", "return torch.relu(y) * 0.0  # fake: degenerate")
HAS_NAN = VALID.replace("return torch.relu(y)", "return torch.log(-torch.relu(y) - 1.0)  # fake: nan")
NONDETERMINISTIC = VALID.replace("return torch.relu(y)", "return torch.relu(y) + 0.0  # fake: nondeterministic")
CRASHES = VALID.replace("return torch.relu(y)", "return torch.relu(y).view(-1, 7)  # fake: crash")
PARSE_ERROR = VALID.replace("def forward(self, x):", "def forward(self, x)")
NO_GET_INPUTS = VALID.replace("def get_inputs():", "def make_inputs():")
NO_MODEL = VALID.replace("class Model(nn.Module):", "class Net(nn.Module):")
NO_FORWARD = VALID.replace("def forward(self, x):", "def __call__(self, x):")
MISSING_API = VALID.replace("nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)", "nn.Identity()")
NO_SMALL_PROFILE = VALID.split("KZ_SIZES")[0]
BAD_SMALL_PROFILE = VALID.replace('"size": 9', '"width": 9')


def _with_import(line: str) -> str:
    return VALID.replace("import torch\n", f"import torch\n{line}\n", 1)


def _in_forward(statement: str) -> str:
    return VALID.replace("        y = self.conv(x)\n", f"        {statement}\n        y = self.conv(x)\n")


FORBIDDEN = {
    "os": (_with_import("import os"), "imports os"),
    "subprocess": (_with_import("import subprocess"), "imports subprocess"),
    "socket": (_with_import("from socket import socket"), "imports from socket"),
    "random": (_with_import("import random"), "imports random"),
    "time": (_with_import("import time"), "imports time"),
    "os.path": (_with_import("import os.path as osp"), "imports os.path"),
    "open": (_in_forward("open('/tmp/x', 'w').write('hi')"), "uses open()"),
    "eval": (_in_forward("eval('1 + 1')"), "uses eval()"),
    "__import__": (_in_forward("__import__('os').system('true')"), "uses __import__"),
    "getattr": (_in_forward("getattr(torch, 'load')"), "uses getattr()"),
    "torch.load": (_in_forward("torch.load('/tmp/w.pt')"), "uses torch.load"),
    "torch.hub": (_in_forward("torch.hub.load('a', 'b')"), "uses torch.hub"),
    "cpp_extension": (_with_import("from torch.utils.cpp_extension import load_inline"), "imports torch.utils"),
    "global state": (_in_forward("torch.set_default_dtype(torch.float64)"), "uses torch.set_default_dtype"),
    "seeding": (_in_forward("torch.manual_seed(0)"), "uses torch.manual_seed"),
    "dunder": (_in_forward("x.__class__.__bases__"), "dunder attribute"),
}


# ----------------------------------------------------------------------------------------------------
# the catalog
# ----------------------------------------------------------------------------------------------------


def test_catalog_has_80_apis_in_the_10_groups():
    cat = builtin_catalog()
    groups = Counter(api.group for api in cat.apis)
    assert len(cat.apis) >= 80
    assert set(groups) == {
        "convolution",
        "normalization",
        "activation",
        "matmul",
        "reduction",
        "pooling",
        "elementwise",
        "shape",
        "loss",
        "attention",
    }
    assert min(groups.values()) >= 4
    assert len(set(cat.names)) == len(cat.names)
    assert all(api.level in (1, 2, 3) and api.dtypes for api in cat.apis)


def test_every_catalog_spelling_exists_in_torch():
    missing = []
    for api in builtin_catalog().apis:
        for spelling in api.spellings:
            if spelling.startswith("op:"):
                continue
            head, _, rest = spelling.partition(".")
            obj = torch.Tensor if head == "Tensor" else torch
            try:
                functools.reduce(getattr, rest.split("."), obj)
            except AttributeError:
                missing.append(spelling)
    assert missing == []


def test_spellings_of_one_api_are_aliases():
    cat = builtin_catalog()
    for spelling in ("nn.Conv2d", "torch.nn.Conv2d", "F.conv2d", "torch.nn.functional.conv2d", "torch.conv2d"):
        assert cat.api_of(canonical_spelling(spelling)) == "Conv2d"
    assert cat.api_of("op:@") == "Matmul"
    assert cat.api_of("Tensor.softmax") == "Softmax"
    assert cat.api_of("torch.nn.functional.relu") == "ReLU"


def test_level_hint():
    cat = builtin_catalog()
    assert cat.level_hint(["Conv2d"]) == 1
    assert cat.level_hint(["Conv2d", "ReLU"]) == 2
    assert cat.level_hint(["MultiheadAttention"]) == 3


def test_user_catalog_adds_and_overrides_apis(tmp_path):
    extra = tmp_path / "mine.json"
    extra.write_text(
        json.dumps(
            {
                "schema": 1,
                "groups": {"fft": "spectral transforms"},
                "apis": [
                    {"name": "FFT", "group": "fft", "spellings": ["torch.fft.fft"], "dtypes": ["float32"]},
                    {"name": "ReLU", "group": "activation", "spellings": ["F.relu"], "level": 2, "notes": "mine"},
                ],
            }
        )
    )
    cat = load_catalog(extra)
    assert cat.get("FFT").group == "fft"
    assert cat.api_of("torch.fft.fft") == "FFT"
    assert cat.get("ReLU").notes == "mine" and cat.get("ReLU").level == 2
    assert cat.api_of("torch.relu") is None  # the override dropped the shipped spellings
    assert len(cat.apis) == len(builtin_catalog().apis) + 1


@pytest.mark.parametrize(
    "apis, message",
    [
        ([{"name": "X", "group": "activation", "spellings": ["F.relu"]}], "belongs to both"),
        ([{"name": "X", "group": "nope", "spellings": ["torch.xlogy"]}], "not declared"),
        ([{"name": "X", "group": "activation", "spellings": ["numpy.exp"]}], "expected nn.X"),
        ([{"name": "X", "group": "activation", "spellings": ["op:<<"]}], "unknown operator"),
        ([{"name": "X", "group": "activation", "spellings": ["torch.xlogy"], "level": 7}], "level must be"),
        ([{"name": "X", "group": "activation", "spellings": ["torch.xlogy"], "dtypes": ["f8"]}], "unknown dtypes"),
        ([{"name": "X", "group": "activation", "spellings": ["torch.xlogy"], "color": 1}], "unknown fields"),
        ([{"name": "X", "spellings": ["torch.xlogy"]}], "needs 'name', 'group'"),
    ],
)
def test_bad_user_catalog_is_rejected_with_a_reason(tmp_path, apis, message):
    extra = tmp_path / "bad.json"
    extra.write_text(json.dumps({"apis": apis}))
    with pytest.raises(CatalogError, match=message):
        load_catalog(extra)


def test_catalog_file_errors(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"apis": [\n  {"name": }\n]}')
    with pytest.raises(CatalogError, match=r"not valid JSON \(line 2"):
        load_catalog(broken)
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "absent.json")
    assert issubclass(CatalogError, KzError)
    with pytest.raises(CatalogError, match="no API named 'Nope'"):
        builtin_catalog().get("Nope")
    assert catalog_mod.CATALOG_PATH.is_file()


# ----------------------------------------------------------------------------------------------------
# the AST gate
# ----------------------------------------------------------------------------------------------------


def test_valid_module_passes_and_reports_the_apis_it_uses():
    check = check_ast(VALID, ["Conv2d", "ReLU"], builtin_catalog())
    assert check.ok and check.result.reason == ""
    assert check.apis_used == ("Conv2d", "ReLU")


@pytest.mark.parametrize(
    "spelled",
    [
        "import torch.nn.functional as F\n...F.conv2d(x, w)",
        "import torch.nn.functional as fn\n...fn.conv2d(x, w)",
        "from torch.nn import functional as F\n...F.conv2d(x, w)",
        "from torch.nn.functional import conv2d\n...conv2d(x, w)",
        "from torch.nn import Conv2d\n...Conv2d(3, 4, 3)(x)",
        "...torch.nn.Conv2d(3, 4, 3)(x)",
        "...torch.conv2d(x, w)",
        "...torch.nn.functional.conv2d(x, w)",
    ],
)
def test_ast_gate_is_alias_aware(spelled):
    imports, _, call = spelled.partition("...")
    code = MISSING_API.replace("import torch\n", f"import torch\n{imports}", 1).replace(
        "y = self.conv(x)", f"w = torch.ones(4, 3, 3, 3)\n        y = {call}"
    )
    check = check_ast(code, ["Conv2d"], builtin_catalog())
    assert check.ok, check.result.reason
    assert "Conv2d" in check.apis_used


def test_functional_alias_satisfies_module_request():
    check = check_ast(ALIAS_FUNCTIONAL, ["Conv2d", "GELU"], builtin_catalog())
    assert check.ok, check.result.reason


def test_tensor_methods_and_operators_count_in_forward_only():
    code = VALID.replace("return torch.relu(y)", "return (y @ y.transpose(-1, -2)).softmax(dim=-1)")
    check = check_ast(code, ["Conv2d", "Matmul", "Transpose", "Softmax"], builtin_catalog())
    assert check.ok, check.result.reason
    # "+" in get_inputs and "*" in __init__ are not the module's compute
    code = VALID.replace("size, size)]", "size, size) + 1.0]").replace(
        "out_channels, kernel", "out_channels * 1, kernel"
    )
    check = check_ast(code, ["Add"], builtin_catalog())
    assert not check.ok and "Add" in check.result.reason
    assert "Mul" not in check.apis_used


@pytest.mark.parametrize(
    "code, reason",
    [
        (PARSE_ERROR, "does not parse (line 17"),
        (NO_GET_INPUTS, "no function get_inputs()"),
        (NO_MODEL, "no class Model"),
        (NO_FORWARD, "class Model has no forward method"),
        (
            MISSING_API,
            "does not use requested API Conv2d (accepted spellings: Conv2d: nn.Conv2d, F.conv2d, torch.conv2d)",
        ),
        (NO_SMALL_PROFILE, 'no KZ_SIZES = {"small": {...}} profile'),
        (BAD_SMALL_PROFILE, 'KZ_SIZES["small"] names width, not module constants'),
        ("", "no code block defining class Model"),
    ],
)
def test_ast_gate_failures_record_a_reason(code, reason):
    check = check_ast(code, ["Conv2d"], builtin_catalog())
    assert not check.ok
    assert reason in check.result.reason


@pytest.mark.parametrize("kind", sorted(FORBIDDEN))
def test_ast_gate_rejects_forbidden_imports_and_calls(kind):
    code, reason = FORBIDDEN[kind]
    check = check_ast(code, ["Conv2d"], builtin_catalog())
    assert not check.ok
    assert reason in check.result.reason
    assert check_ast(VALID, ["Conv2d"], builtin_catalog()).ok  # the same module without it passes


def test_small_profile_can_be_optional_and_imports_configurable():
    assert check_ast(NO_SMALL_PROFILE, ["Conv2d"], builtin_catalog(), AstGateConfig(require_small_profile=False)).ok
    with_typing = _with_import("from typing import List")
    assert not check_ast(with_typing, ["Conv2d"], builtin_catalog()).ok
    allowed = AstGateConfig(allowed_imports=("torch", "math", "typing"))
    assert check_ast(with_typing, ["Conv2d"], builtin_catalog(), allowed).ok


# Verbatim KernelBench style: docstrings, annotations, super(Model, self), constants after the class, no KZ_SIZES.
KERNELBENCH_STYLE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Simple model that performs a matrix multiplication followed by a scaled softmax.
    """
    def __init__(self, scale: float):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.matmul(A, B) * self.scale, dim=-1)

M = 1024
N = 2048

def get_inputs():
    A = torch.randn(M, N)
    B = torch.randn(N, M)
    return [A, B]

def get_init_inputs():
    return [0.5]  # scale
'''


def test_kernelbench_style_module_passes_without_the_small_profile_requirement():
    cat = builtin_catalog()
    lenient = AstGateConfig(require_small_profile=False)
    check = check_ast(KERNELBENCH_STYLE, ["Matmul", "Softmax", "Mul"], cat, lenient)
    assert check.ok, check.result.reason
    assert check.apis_used == ("Softmax", "Matmul", "Mul")
    assert "KZ_SIZES" in check_ast(KERNELBENCH_STYLE, ["Matmul"], cat).result.reason


def test_builtin_suite_passes_the_ast_gate_with_the_apis_it_uses():
    cat = builtin_catalog()
    used = {}
    for problem in load_problems("builtin:1") + load_problems("builtin:2"):
        check = check_ast(problem.source, [], cat)
        assert check.ok, f"{problem.key}: {check.result.reason}"
        assert check.apis_used, problem.key
        assert check_ast(problem.source, check.apis_used, cat).ok
        used[problem.name] = set(check.apis_used)
    assert used["24_Conv2d"] == {"Conv2d"}
    assert used["10_Conv2d_Mish"] == {"Conv2d", "Mish"}
    assert used["19_Matmul"] == {"Matmul"}
    assert used["17_CrossEntropyLoss"] == {"CrossEntropyLoss"}


# ----------------------------------------------------------------------------------------------------
# dedup
# ----------------------------------------------------------------------------------------------------


def test_renamed_variables_and_whitespace_give_the_same_dedup_key():
    assert dedup_key(VALID, ["Conv2d"]) == dedup_key(VALID_RENAMED, ["Conv2d"])


@pytest.mark.parametrize(
    "changed",
    [
        VALID.replace("out_channels = 128", "out_channels = 256"),  # another shape
        VALID.replace('"size": 9', '"size": 10'),  # another small profile
        VALID.replace("torch.relu(y)", "torch.sigmoid(y)"),  # another op
        VALID.replace("padding=1)", "padding=2)"),  # another argument
        VALID.replace("return torch.relu(y)", "return torch.relu(y.view(-1))"),  # view vs reshape stay apart
    ],
)
def test_real_changes_give_another_dedup_key(changed):
    assert dedup_key(changed, ["Conv2d"]) != dedup_key(VALID, ["Conv2d"])


def test_dedup_key_includes_the_api_set():
    assert dedup_key(VALID, ["Conv2d"]) != dedup_key(VALID, ["Conv2d", "ReLU"])
    assert dedup_key(VALID, ["ReLU", "Conv2d"]) == dedup_key(VALID, ["Conv2d", "ReLU"])
    view = VALID.replace("return torch.relu(y)", "return torch.relu(y.view(-1))")
    assert dedup_key(view, ["Conv2d"]) != dedup_key(view.replace(".view(", ".reshape("), ["Conv2d"])


# ----------------------------------------------------------------------------------------------------
# runtime gate verdicts (from the sandboxed checker's report)
# ----------------------------------------------------------------------------------------------------


def test_runtime_gates_stop_at_the_first_failure():
    ok = runtime_gates(ProblemReport("p", ok_runs=True, deterministic=True, finite=True, degenerate=False))
    assert list(ok) == ["runs", "deterministic", "finite", "degenerate"] and all(g.ok for g in ok.values())
    crash = runtime_gates(ProblemReport("p", ok_runs=False, reason="RuntimeError: shape mismatch"))
    assert crash == {"runs": GateResult(False, "RuntimeError: shape mismatch")}
    flaky = runtime_gates(ProblemReport("p", ok_runs=True, deterministic=False))
    assert flaky["deterministic"] == GateResult(False, "two runs disagree") and "finite" not in flaky
    nan = runtime_gates(ProblemReport("p", ok_runs=True, deterministic=True, finite=False, reason="3 NaN"))
    assert nan["finite"] == GateResult(False, "3 NaN")
    flat = runtime_gates(ProblemReport("p", ok_runs=True, deterministic=True, finite=True, degenerate=True))
    assert not flat["degenerate"].ok and "constant" in flat["degenerate"].reason


# ----------------------------------------------------------------------------------------------------
# sampling API sets from the pool's history
# ----------------------------------------------------------------------------------------------------

_ALL_OK = {name: GateResult(True) for name in GATE_ORDER}


def _task(apis, p=None, k=4, accepted=True, round=0, id=None):
    rates = () if p is None else (PassRate(round, k, round_half(p * k)),)
    gates = _ALL_OK if accepted else {"ast": GateResult(False, "does not parse")}
    return TaskRecord(id=id or "-".join(apis), apis=apis, level=1, code="", gates=gates, pass_rates=rates)


def round_half(x: float) -> int:
    return int(x + 0.5)


def test_api_weights_pinned_values():
    cat = builtin_catalog()
    assert set(api_weights(cat, []).values()) == {1.0}
    one_failure = api_weights(cat, [_task(("Conv2d",), p=0.0)], failure_boost=2.0)
    assert one_failure["Conv2d"] == 2.0  # 1 + 2 * (1 - 0) / (1 + 1)
    assert one_failure["ReLU"] == 1.0
    mixed = api_weights(cat, [_task(("Conv2d", "ReLU"), p=0.0), _task(("Conv2d",), p=0.5)], failure_boost=2.0)
    assert mixed["Conv2d"] == 2.0  # 1 + 2 * (1 + 0.5) / (2 + 1)
    assert mixed["ReLU"] == 2.0
    solved = api_weights(cat, [_task(("Conv2d",), p=1.0)])
    assert solved["Conv2d"] == 1.0
    # a gate failure is the Proposer's failure, not the Coder's; an untried task has no pass rate
    assert api_weights(cat, [_task(("Conv2d",), accepted=False), _task(("GELU",))])["Conv2d"] == 1.0


def test_api_weights_grow_with_failures_and_use_the_latest_round():
    cat = builtin_catalog()
    weights = [api_weights(cat, [_task(("Conv2d",), p=0.0, id=str(i)) for i in range(n)])["Conv2d"] for n in range(5)]
    assert weights == sorted(weights) and weights[0] == 1.0 and weights[-1] == 1.0 + 2.0 * 4 / 5
    improved = TaskRecord(
        id="t",
        apis=("Conv2d",),
        level=1,
        code="",
        gates=_ALL_OK,
        pass_rates=(PassRate(0, 4, 0), PassRate(1, 4, 4)),
    )
    assert api_weights(cat, [improved])["Conv2d"] == 1.0


def test_sampling_is_weighted_toward_failed_apis():
    cat = builtin_catalog()
    size_one = SamplerConfig(min_size=1, max_size=1, failure_boost=50.0, replay_prob=0.0)
    history = [_task(("Conv2d",), p=0.0)]
    fresh = Counter(s[0] for s in sample_api_sets(cat, 3000, [], size_one, rng=1))
    fed_back = Counter(s[0] for s in sample_api_sets(cat, 3000, history, size_one, rng=1))
    assert fresh["Conv2d"] / 3000 < 0.03  # about 1 / len(catalog)
    assert fed_back["Conv2d"] / 3000 > 0.12  # weight 26 among 116 others of weight 1: about 0.18


def test_failed_api_sets_are_replayed():
    cat = builtin_catalog()
    history = [_task(("Conv2d", "Mish"), p=0.0), _task(("GELU",), p=1.0)]
    assert failed_api_sets(history) == [(("Conv2d", "Mish"), 1.0)]
    sets = sample_api_sets(cat, 200, history, SamplerConfig(replay_prob=1.0), rng=3)
    assert all({"Conv2d", "Mish"} <= set(s) and len(s) in (2, 3) for s in sets)
    assert {len(s) for s in sets} == {2, 3}  # half are extended by one API


def test_sampled_sets_respect_size_range_exclusive_groups_and_seed():
    cat = builtin_catalog()
    config = SamplerConfig(min_size=2, max_size=4)
    sets = sample_api_sets(cat, 500, [], config, rng=7)
    assert {len(s) for s in sets} == {2, 3, 4}
    assert all(len(set(s)) == len(s) for s in sets)
    assert all(sum(cat.get(a).group == "loss" for a in s) <= 1 for s in sets)
    order = {name: i for i, name in enumerate(cat.names)}
    assert all(list(s) == sorted(s, key=order.__getitem__) for s in sets)
    assert sets == sample_api_sets(cat, 500, [], config, rng=7)
    assert sets != sample_api_sets(cat, 500, [], config, rng=8)


def test_the_curriculum_draws_seen_apis_first_and_widens_with_accepted_tasks():
    """unseen_weight: an API outside known_apis and every accepted task's is drawn that much as often."""
    cat = builtin_catalog()
    known = {"ReLU", "Add", "Conv2d"}
    config = SamplerConfig(min_size=1, max_size=1, replay_prob=0.0, known_apis=known, unseen_weight=0.01)
    n, others = 4000, len(cat.apis) - len(known)
    drawn = Counter(s[0] for s in sample_api_sets(cat, n, [], config, rng=5))
    expected = len(known) / (len(known) + 0.01 * others)  # 3 of weight 1 against 114 of 0.01: ~0.72
    assert abs(sum(drawn[a] for a in known) / n - expected) < 0.03
    # an accepted module that uses GELU makes it seen; a rejected one (failed a gate) does not
    history = [_task(("GELU",), p=0.5), _task(("Mish",), accepted=False)]
    widened = Counter(s[0] for s in sample_api_sets(cat, n, history, config, rng=5))
    assert widened["GELU"] / n > 0.15 and widened["Mish"] / n < 0.01
    # the default draws every API alike, known or not
    plain = Counter(s[0] for s in sample_api_sets(cat, n, [], SamplerConfig(min_size=1, max_size=1), rng=5))
    assert sum(plain[a] for a in known) / n < 0.06


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_size": 0},
        {"min_size": 3, "max_size": 2},
        {"failure_boost": -1},
        {"replay_prob": 2},
        {"unseen_weight": 0},
        {"unseen_weight": 1.5},
    ],
)
def test_bad_sampler_config(kwargs):
    with pytest.raises(SamplerError):
        SamplerConfig(**kwargs)


# ----------------------------------------------------------------------------------------------------
# the prompt
# ----------------------------------------------------------------------------------------------------


def test_prompt_names_the_apis_rules_and_builtin_examples():
    cat = builtin_catalog()
    examples = load_examples(cat)
    chosen = choose_examples(examples, ["Conv2d"], random.Random(0), count=2)
    assert {p.name for p in chosen} == {"24_Conv2d", "27_Conv2dStride2"}  # the level-1 problems using Conv2d
    chat = build_proposer_prompt([cat.get("Conv2d")], chosen)
    assert [m["role"] for m in chat] == ["system", "user"]
    user = chat[1]["content"]
    assert "Conv2d (convolution): write it as nn.Conv2d / F.conv2d / torch.conv2d" in user
    assert "KZ_SIZES" in user and "1-15 ms" in user and "Import only torch" in user
    assert chosen[0].source.strip() in user
    pair = choose_examples(examples, ["Conv2d", "Mish"], random.Random(0), count=1)
    assert pair[0].level == 2 and "Conv2d" in pair[0].source
    assert choose_examples(examples, ["Conv2d", "Mish"], random.Random(5), count=2) == choose_examples(
        examples, ["Conv2d", "Mish"], random.Random(5), count=2
    )
    assert prompt_hash(chat) == prompt_hash(build_proposer_prompt([cat.get("Conv2d")], chosen))
    assert prompt_hash(chat) != prompt_hash(build_proposer_prompt([cat.get("Conv3d")], chosen))


def test_cold_start_rows_answer_each_modules_own_api_set_and_never_show_it():
    """The Proposer's cold start: each module is the answer to the Proposer prompt for the APIs it uses; the
    prompt's examples are never the module itself or the suite problem it is a variant of, and the answer is
    what the Proposer's extraction and AST gate accept for that request. A module that fails the gate makes
    no row, and is counted."""
    from kzcore.proposer.prompt import cold_start_rows
    from kzcore.types import Problem

    cat = builtin_catalog()
    examples = load_examples(cat)
    suite = {p.name: p for p in load_problems("builtin:1")}
    variant = Problem(name="24_Conv2d__v3", source=suite["24_Conv2d"].source.replace("64", "32"), level=1)
    broken = Problem(name="bad", source="import os\n" + suite["19_Matmul"].source, level=1)
    rows, counts = cold_start_rows([suite["24_Conv2d"], variant, suite["19_Matmul"], broken], cat, examples)
    assert counts == {"rows": 3, "no_catalog_api": 0, "fails_ast_gate": 1}
    assert [r["problem"] for r in rows] == ["24_Conv2d", "24_Conv2d__v3", "19_Matmul"]
    for row, problem in zip(rows, [suite["24_Conv2d"], variant, suite["19_Matmul"]]):
        user = row["prompt"][1]["content"]
        assert row["apis"] == list(check_ast(problem.source, [], cat).apis_used)
        assert user.startswith(f"Write a new problem module that uses exactly these {len(row['apis'])} PyTorch")
        origin = suite[problem.name.split("__v")[0]]
        assert origin.source.strip() not in user and "Examples of the format" in user
        answer = row["completion"][0]["content"]
        assert check_ast(extract_module(answer), row["apis"], cat).ok
    assert (
        "27_Conv2dStride2" in {p.name for p, _ in examples}
        and suite["27_Conv2dStride2"].source.strip() in (rows[0]["prompt"][1]["content"])
    )  # another Conv2d problem is still shown


def test_per_api_examples_show_each_requested_api_on_its_own_and_never_the_answer():
    """``[proposer] examples = "per-api"``: one module per requested API that uses it, alone where one does; a
    module using exactly the requested set is never shown (the answer to copy); an API no module shows gets
    none and the suite's examples fill up to ``count``."""
    from kzcore.proposer.prompt import api_examples, api_pool

    cat = builtin_catalog()
    suite = load_examples(cat)
    pool = api_pool([p for spec in ("builtin:1", "builtin:2") for p in load_problems(spec)], cat)
    for seed in range(5):
        shown = choose_examples(suite, ["Conv2d", "Mish"], random.Random(seed), 2, per_api=pool)
        assert [p.name for p in shown][:1] in (["24_Conv2d"], ["27_Conv2dStride2"])  # Conv2d alone, not with Mish
        assert len(shown) == 2 and shown[1].level == 2  # the suite's pair, filling in for Mish
    # Mish is shown only with Conv2d (10_Conv2d_Mish): that module is the requested set itself, so it is left out
    assert [p.name for p in api_examples(pool, ["Conv2d", "Mish"], random.Random(0))] in (
        ["24_Conv2d"],
        ["27_Conv2dStride2"],
    )
    alone = api_examples(pool, ["Sigmoid", "Tanh"], random.Random(1))
    assert [p.name for p in alone][0] == "3_Sigmoid"  # the API on its own beats 2_Gemm_Scale_Sigmoid & co.
    assert alone[1].name in {"9_Conv2d_Tanh_Scale", "12_Conv2d_ChannelMin_Tanh"}  # the fewest APIs that show Tanh
    # a request whose own module is the only one showing it: none (never the answer), the suite fills in
    assert api_examples(pool, ["Argmax"], random.Random(0)) == []
    filled = choose_examples(suite, ["Argmax"], random.Random(0), 2, per_api=pool)
    assert filled == choose_examples(suite, ["Argmax"], random.Random(0), 2)
    # four APIs: four examples, more than count, none twice
    many = choose_examples(suite, ["ReLU", "GELU", "Sigmoid", "Softplus"], random.Random(0), 2, per_api=pool)
    assert [p.name for p in many] == ["1_ReLU", "2_GELU", "3_Sigmoid", "5_Softplus"]


def test_per_api_cold_start_rows_show_every_requested_api_but_never_the_module():
    from kzcore.proposer.prompt import cold_start_rows

    cat = builtin_catalog()
    problems = [p for spec in ("builtin:1", "builtin:2") for p in load_problems(spec)]
    rows, counts = cold_start_rows(problems, cat, load_examples(cat), per_api=True)
    assert counts["rows"] == len(problems)
    by_name = {p.name: p for p in problems}
    apis = {p.name: set(check_ast(p.source, [], cat).apis_used) for p in problems}
    for row in rows:
        user = row["prompt"][1]["content"]
        assert by_name[row["problem"]].source.strip() not in user
        examples = [p for p in problems if p.source.strip() in user]
        assert len(examples) >= 2
        used = set().union(*(apis[p.name] for p in examples))
        wanted = set(row["apis"])
        for api in wanted:  # shown wherever another module, not the requested set itself, uses it
            others = [n for n, u in apis.items() if n != row["problem"] and api in u and u != wanted]
            assert api in used or not others, (row["problem"], api)
    plain, _ = cold_start_rows(problems, cat, load_examples(cat))
    assert [r["prompt"] for r in plain] != [r["prompt"] for r in rows]


def test_extract_module():
    assert extract_module(f"Here:\n```python\n{VALID}```\nDone.") == VALID
    two = f"```python\nclass Model:\n    pass\n```\n```python\n{VALID_RENAMED}```"
    assert extract_module(two) == VALID_RENAMED
    assert extract_module(f"<think>```python\n{VALID_RENAMED}```</think>\n```python\n{VALID}```") == VALID
    assert extract_module(VALID) == VALID
    assert extract_module("```python\nclass ModelNew(nn.Module):\n    pass\n```") == ""
    assert extract_module("I cannot do that.") == ""


# ----------------------------------------------------------------------------------------------------
# propose() end to end: scripted completions through the real gates
# ----------------------------------------------------------------------------------------------------


class ScriptedPolicy:
    """Returns the given completions in order, one per prompt, and records the prompts."""

    name = "scripted"

    def __init__(self, completions):
        self.queue = list(completions)
        self.prompts = []
        self.params = []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        self.params.append(params)
        return [[Completion(text=self.queue.pop(0), prompt_index=i)] for i in range(len(prompts))]

    def close(self):
        pass


class FakeChecker:
    """Stands in for the sandboxed worker check (kzcore.evaluate.problem_check.check_problems): reads a
    '# fake: ...' marker from the module's source instead of running it."""

    VERDICTS = {
        "fake: crash": {"ok_runs": False, "reason": "does not run: RuntimeError: shape '[-1, 7]' is invalid"},
        "fake: nondeterministic": {"ok_runs": True, "reason": "max diff 0.3 between runs"},
        "fake: nan": {"ok_runs": True, "deterministic": True, "reason": "outputs contain NaN or Inf"},
        "fake: degenerate": {"ok_runs": True, "deterministic": True, "finite": True, "reason": "output ~0"},
    }
    GOOD = {"ok_runs": True, "deterministic": True, "finite": True, "degenerate": False}

    def __init__(self):
        self.seen = []

    def __call__(self, problems, config):
        self.seen.extend(problems)
        reports = []
        for problem in problems:
            fields = next((v for marker, v in self.VERDICTS.items() if marker in problem.source), self.GOOD)
            reports.append(ProblemReport(problem=problem.name, level=problem.level, **fields))
        return reports


def _conv_catalog() -> Catalog:
    """A one-API catalog, so every request is {Conv2d} and the scripted completions line up."""
    cat = builtin_catalog()
    return Catalog(apis=(cat.get("Conv2d"),), groups=cat.groups)


def _fenced(code: str) -> str:
    return f"Here is the module:\n```python\n{code}```\n"


SCRIPT = [
    ("valid", _fenced(VALID), None, ""),
    ("alias", _fenced(ALIAS_FUNCTIONAL), None, ""),
    ("parse error", _fenced(PARSE_ERROR), "ast", "does not parse"),
    ("missing get_inputs", _fenced(NO_GET_INPUTS), "ast", "no function get_inputs()"),
    ("duplicate in batch", _fenced(VALID_RENAMED), "duplicate", "duplicate of task "),
    ("missing API", _fenced(MISSING_API), "ast", "does not use requested API Conv2d"),
    ("forbidden os", _fenced(FORBIDDEN["os"][0]), "ast", "imports os"),
    ("forbidden open", _fenced(FORBIDDEN["open"][0]), "ast", "uses open()"),
    ("forbidden socket", _fenced(FORBIDDEN["socket"][0]), "ast", "imports from socket"),
    ("duplicate across batches", _fenced(VALID_RENAMED.replace("out", "res")), "duplicate", "duplicate of task "),
    ("degenerate", _fenced(DEGENERATE), "degenerate", "output ~0"),
    ("nan", _fenced(HAS_NAN), "finite", "outputs contain NaN"),
    ("nondeterministic", _fenced(NONDETERMINISTIC), "deterministic", "max diff 0.3"),
    ("crash", _fenced(CRASHES), "runs", "does not run: RuntimeError"),
    ("no code", "Sorry, I can't.", "ast", "no code block"),
]


def test_propose_runs_scripted_completions_through_the_gates(tmp_path):
    pool = tmp_path / "pool.jsonl"
    policy = ScriptedPolicy([text for _, text, _, _ in SCRIPT])
    checker = FakeChecker()
    summary = propose(
        policy,
        len(SCRIPT),
        catalog=_conv_catalog(),
        pool_path=pool,
        check_problems=checker,
        seed=3,
        round=2,
        batch_size=6,
    )
    records = read_pool(pool)
    assert [r.id for r in records] == [r.id for r in summary.records]
    assert len({r.id for r in records}) == len(SCRIPT)
    for (label, _, gate, reason), record in zip(SCRIPT, records):
        assert record.apis == ("Conv2d",), label
        assert record.failed_gate == gate, label
        assert record.accepted == (gate is None), label
        if gate:
            assert reason in record.gates[gate].reason, label
            assert list(record.gates)[-1] == gate, label  # nothing runs after the first failure
    valid, alias = records[0], records[1]
    assert list(valid.gates) == list(GATE_ORDER)
    assert records[4].gates["duplicate"].reason == f"duplicate of task {valid.id}"  # same batch
    assert records[9].gates["duplicate"].reason == f"duplicate of task {valid.id}"  # a later batch
    assert alias.apis_used == ("Conv2d",)  # GELU is not in this one-API catalog
    assert summary.attempted == len(SCRIPT) and summary.accepted == 2
    assert summary.failures == {
        "ast": 7,
        "duplicate": 2,
        "degenerate": 1,
        "finite": 1,
        "deterministic": 1,
        "runs": 1,
    }
    # the sandboxed checker only sees modules that passed the AST gate and are not duplicates
    assert len(checker.seen) == 6
    assert {p.name for p in checker.seen} >= {valid.name, alias.name}
    assert all(p.level == 1 and p.suite == "proposer" for p in checker.seen)
    # batches of 6 prompts, each one asking for Conv2d with built-in examples
    assert len(policy.params) == 3 and all(p.n == 1 for p in policy.params)
    assert all("Conv2d (convolution)" in chat[1]["content"] for chat in policy.prompts)
    assert all("class Model(nn.Module)" in chat[1]["content"] for chat in policy.prompts)
    prov = valid.provenance
    assert prov["policy"] == "scripted" and prov["round"] == 2 and prov["seed"] == 3 and prov["sample"] == 0
    assert prov["prompt_hash"] == prompt_hash(policy.prompts[0]) and prov["time"].endswith("+00:00")
    assert [p.name for p in accepted_problems(records)] == [valid.name, alias.name]


def test_propose_through_the_real_sandboxed_checker(tmp_path, own_workers):
    """The same flow with kzcore.evaluate.problem_check.check_problems running the modules in CPU workers."""
    from kzcore.evaluate.problem_check import check_problems

    script = [
        (VALID, None, ""),
        (ALIAS_FUNCTIONAL, None, ""),
        (CRASHES, "runs", "does not run"),
        (VALID.replace("return torch.relu(y)", "return torch.relu(y) + torch.rand_like(y)"), "deterministic", ""),
        (HAS_NAN, "finite", "NaN"),
        (DEGENERATE, "degenerate", "~0"),
        (MISSING_API, "ast", "does not use requested API Conv2d"),
    ]
    summary = propose(
        ScriptedPolicy([_fenced(code) for code, _, _ in script]),
        len(script),
        catalog=_conv_catalog(),
        pool_path=tmp_path / "pool.jsonl",
        check_problems=check_problems,
        config=EvalConfig(device="cpu", size="small", trials=1, timeout_s=60.0),
        examples=0,
    )
    for (_, gate, reason), record in zip(script, summary.records):
        assert record.failed_gate == gate, record.gates
        if gate:
            assert reason in record.gates[gate].reason
    assert summary.accepted == 2


def test_propose_dedups_against_the_existing_pool(tmp_path):
    pool = tmp_path / "pool.jsonl"
    propose(ScriptedPolicy([_fenced(VALID)]), 1, catalog=_conv_catalog(), pool_path=pool, check_problems=FakeChecker())
    checker = FakeChecker()
    progress = []
    summary = propose(
        ScriptedPolicy([_fenced(VALID_RENAMED), _fenced(ALIAS_FUNCTIONAL)]),
        2,
        catalog=_conv_catalog(),
        pool_path=pool,
        check_problems=checker,
        examples=0,
        progress=progress.append,
    )
    assert progress == list(summary.records)
    first = read_pool(pool)[0]
    assert summary.records[0].gates["duplicate"] == GateResult(False, f"duplicate of task {first.id}")
    assert summary.records[1].accepted
    assert [p.name for p in checker.seen] == [summary.records[1].name]
    assert len(read_pool(pool)) == 3


def test_propose_rejects_a_checker_that_breaks_its_contract(tmp_path):
    with pytest.raises(ProposerError, match="returned 0 reports for 1 problems"):
        propose(
            ScriptedPolicy([_fenced(VALID)]),
            1,
            catalog=_conv_catalog(),
            pool_path=tmp_path / "p.jsonl",
            check_problems=lambda problems, config: [],
        )
    with pytest.raises(ProposerError, match="returned a report on 'other'"):
        propose(
            ScriptedPolicy([_fenced(VALID)]),
            1,
            catalog=_conv_catalog(),
            pool_path=tmp_path / "p.jsonl",
            check_problems=lambda problems, config: [ProblemReport("other", ok_runs=True)],
        )
    with pytest.raises(ProposerError, match="n must be >= 1"):
        propose(ScriptedPolicy([]), 0, catalog=_conv_catalog(), pool_path=tmp_path / "p.jsonl", check_problems=None)


def test_propose_passes_the_eval_config_to_the_checker(tmp_path):
    seen = []

    def checker(problems, config):
        seen.append(config)
        return FakeChecker()(problems, config)

    config = EvalConfig(device="cpu", size="small", timeout_s=20.0)
    propose(
        ScriptedPolicy([_fenced(VALID)]),
        1,
        catalog=_conv_catalog(),
        pool_path=tmp_path / "p.jsonl",
        check_problems=checker,
        config=config,
    )
    assert seen == [config]


# ----------------------------------------------------------------------------------------------------
# the pool
# ----------------------------------------------------------------------------------------------------


def _pool_with_history(tmp_path):
    pool = tmp_path / "pool.jsonl"
    propose(
        ScriptedPolicy([_fenced(t) for t in (VALID, ALIAS_FUNCTIONAL, PARSE_ERROR, VALID_RENAMED, DEGENERATE)]),
        5,
        catalog=_conv_catalog(),
        pool_path=pool,
        check_problems=FakeChecker(),
        examples=0,
    )
    return pool


def test_task_record_json_round_trip(tmp_path):
    pool = _pool_with_history(tmp_path)
    records = read_pool(pool)
    rows = [json.loads(line) for line in pool.read_text().splitlines()]
    assert [TaskRecord.from_json(r) for r in rows] == records
    assert rows[0]["name"] == f"proposed_{rows[0]['id']}" and rows[0]["accepted"] is True
    assert rows[2]["gates"] == {"ast": {"ok": False, "reason": records[2].gates["ast"].reason}}
    copy = tmp_path / "copy.jsonl"
    append_records(copy, records)
    assert read_pool(copy) == records


def test_record_pass_rates_and_feedback_to_the_sampler(tmp_path):
    pool = _pool_with_history(tmp_path)
    valid, alias = [r for r in read_pool(pool) if r.accepted]
    assert record_pass_rates(pool, 0, {valid.id: (0, 4), alias.id: (4, 4)}) == 2
    assert record_pass_rates(pool, 1, {valid.id: (1, 4)}) == 1
    assert record_pass_rates(pool, 1, {valid.id: (2, 4)}) == 1  # a round's result is replaced, not added
    records = {r.id: r for r in read_pool(pool)}
    assert records[valid.id].pass_rates == (PassRate(0, 4, 0), PassRate(1, 4, 2))
    assert records[valid.id].latest_pass_rate == 0.5
    assert records[alias.id].latest_pass_rate == 1.0
    weights = api_weights(builtin_catalog(), list(records.values()))
    assert weights["Conv2d"] == 1.0 + 2.0 * (0.5 + 0.0) / 3
    assert weights["GELU"] == 1.0
    with pytest.raises(PoolError, match="no task with id nope"):
        record_pass_rates(pool, 0, {"nope": (1, 4)})
    with pytest.raises(PoolError, match="5 passed of only 4"):
        record_pass_rates(pool, 0, {valid.id: (5, 4)})


def test_pool_stats_and_histogram(tmp_path):
    pool = _pool_with_history(tmp_path)
    records = read_pool(pool)
    valid, alias = [r for r in records if r.accepted]
    assert pass_rate_histogram(records, tmp_path / "none.png") is None
    record_pass_rates(pool, 0, {valid.id: (2, 4), alias.id: (0, 4)})
    records = read_pool(pool)
    s = stats(records)
    assert (s.total, s.accepted, s.with_pass_rate) == (5, 2, 2)
    assert s.failures == {"ast": 1, "duplicate": 1, "degenerate": 1}
    assert s.pass_rates == {0.0: 1, 0.5: 1}
    assert any(k.startswith("ast: does not parse") for k in s.reasons)
    png = pass_rate_histogram(records, tmp_path / "out" / "hist.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_read_pool_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n')
    with pytest.raises(PoolError, match=r"bad.jsonl:1: not a task record"):
        read_pool(bad)
    bad.write_text('{"schema": 99, "id": "a"}\n')
    with pytest.raises(PoolError, match="schema 99"):
        read_pool(bad)
    with pytest.raises(PoolError, match="cannot read"):
        read_pool(tmp_path / "absent.jsonl")


def test_pool_loads_as_a_hf_dataset(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    pool = _pool_with_history(tmp_path)
    record_pass_rates(pool, 0, {read_pool(pool)[0].id: (3, 4)})
    ds = to_hf_dataset(pool, cache_dir=tmp_path / "cache")
    assert len(ds) == 5
    assert {"id", "apis", "code", "gates", "pass_rates", "provenance", "accepted"} <= set(ds.column_names)
    assert ds[0]["pass_rates"][0]["p"] == 0.75
    assert ds[0]["gates"]["ast"] == {"ok": True, "reason": ""}
    assert ds[2]["gates"]["ast"]["ok"] is False
    assert ds["accepted"] == [r.accepted for r in read_pool(pool)]
    with pytest.raises(PoolError, match="no such file"):
        to_hf_dataset(tmp_path / "absent.jsonl")
