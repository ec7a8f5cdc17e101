"""Decontamination (kzcore.decontam, `kz decontam`, ``[heldout] decontaminate``): the fixed rule on small
modules written for the purpose, the op sets it compares, the command on temporary suites and on the vendored
KernelBench level 1, its one-line errors, and what the trainer does with the report."""

from __future__ import annotations

import json
import types
from pathlib import Path

import attrs
import pytest

from kz_suites import BUILTIN_SUITE, KERNELBENCH_COPY
from kzcore import decontam
from kzcore.decontam import (
    SAME_OPS_SIMILARITY,
    SIMILARITY,
    decontaminate,
    fingerprint,
    normalized_tokens,
    similarity,
    torch_ops,
)
from kzcore.problems import load_problem_file
from kzcore.types import Problem
from tests.test_cli_subprocess import error_line, kz

SIGMOID = '''"""Sigmoid activation over a large 2-D tensor."""

import torch
from torch import nn

batch_size = 32768
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

# SIGMOID's module with other names, sizes, docstrings, comments, annotations, import aliases and super()
# call, and one token changed: sigmoid -> silu
SILU = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    \"\"\"SiLU (x * sigmoid(x)).\"\"\"

    def __init__(self) -> None:
        super(Model, self).__init__()

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        # one activation, elementwise
        return F.silu(inp)


rows = 4096
cols = 393216


def get_inputs():
    tensor = torch.randn(rows, cols)
    return [tensor]


def get_init_inputs():
    return []  # nothing to configure
"""

CONV_GROUPNORM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(groups, out_channels)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1, 1) * 0.02)

    def forward(self, x):
        x = self.conv(x)
        x = self.norm(x)
        x = torch.clamp(x + self.bias, min=0.0, max=1.0)
        return x.mean(dim=[2, 3, 4])


batch_size = 16
in_channels, out_channels, kernel_size, groups = 3, 16, 3, 4


def get_inputs():
    return [torch.randn(batch_size, in_channels, 16, 32, 32)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups]
"""


def problem(name: str, source: str, level: int = 1, suite: str = "t") -> Problem:
    return Problem(name=name, source=source, level=level, suite=suite)


# -- the rule ------------------------------------------------------------------------------------------------
def test_names_sizes_comments_and_layout_change_no_token():
    renamed = SILU.replace("F.silu(inp)", "torch.sigmoid(inp)")
    assert normalized_tokens(renamed) == normalized_tokens(SIGMOID)
    tokens = normalized_tokens(SIGMOID)
    assert "torch.sigmoid" in tokens and "NUM" in tokens and "x" not in tokens and "batch_size" not in tokens
    assert not any("Sigmoid activation" in t for t in tokens)  # the docstring is gone, not a STR token


def test_a_renamed_copy_one_token_apart_is_a_near_duplicate():
    """The sigmoid module against a silu module that differs from it by one token once names are normalised:
    flagged by similarity alone (their op sets differ)."""
    a, b = fingerprint(problem("3_Sigmoid", SIGMOID)), fingerprint(problem("25_Silu", SILU))
    sim = similarity(a.tokens, b.tokens)
    assert len(a.tokens) == len(b.tokens) and sum(x != y for x, y in zip(a.tokens, b.tokens)) == 1
    assert SIMILARITY <= sim < 1.0
    assert a.ops == {"sigmoid"} and b.ops == {"silu"}
    report = decontaminate([problem("3_Sigmoid", SIGMOID, suite="train")], [problem("25_Silu", SILU, suite="kb")])
    assert [p.name for p in report.contaminated] == ["25_Silu"] and report.clean == []
    (pair,) = report.pairs
    assert (pair.rule, pair.same_ops, pair.train.name) == ("similarity", False, "3_Sigmoid")


def test_unrelated_problems_are_not_flagged():
    relu = (BUILTIN_SUITE / "level1" / "1_ReLU.py").read_text()
    matmul = (BUILTIN_SUITE / "level1" / "19_Matmul.py").read_text()
    train = [problem("1_ReLU", relu), problem("19_Matmul", matmul)]
    report = decontaminate(train, [problem("9_Conv3d_GroupNorm", CONV_GROUPNORM, level=2)])
    assert report.pairs == () and [p.name for p in report.clean] == ["9_Conv3d_GroupNorm"]
    nearest = report.nearest[0]
    assert nearest.similarity < SAME_OPS_SIMILARITY and not nearest.near_duplicate


def test_the_same_ops_written_differently_are_flagged_by_the_lower_threshold():
    """Built-in 17_CrossEntropyLoss (nn.CrossEntropyLoss built in __init__) against KernelBench's
    95_CrossEntropyLoss (F.cross_entropy in forward): one op, similarity below SIMILARITY."""
    ours = load_problem_file(BUILTIN_SUITE / "level1" / "17_CrossEntropyLoss.py", suite="builtin")
    theirs = load_problem_file(KERNELBENCH_COPY / "level1" / "95_CrossEntropyLoss.py", level=1, suite="kb")
    (pair,) = decontaminate([ours], [theirs]).pairs
    assert pair.same_ops and SAME_OPS_SIMILARITY <= pair.similarity < SIMILARITY and pair.rule == "same-ops"


def test_op_sets():
    source = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3)
        self.scale = nn.Parameter(torch.ones(c) * 2)
        nn.init.uniform_(self.conv.weight, -0.1, 0.1)

    def forward(self, x, w):
        x = self.conv(x)
        x = F.gelu(x) + torch.tanh(x).sum(dim=1, keepdim=True)
        return helper(x) @ w


def helper(y):
    return y.view(y.size(0), -1).softmax(-1)


def get_inputs():
    return [torch.randn(2, 3, 8, 8), torch.rand(8, 8)]


def get_init_inputs():
    return [3]
"""
    assert torch_ops(source) == {
        "conv2d", "parameter",  # nn modules the constructor builds; not torch.ones nor nn.init.uniform_
        "gelu", "tanh", "sum", "add", "matmul", "view", "size", "softmax",  # forward and its helper
    }  # fmt: skip
    # one name per op whatever the spelling; input generation and self.<module>(...) calls are not ops
    spellings = [
        "torch.relu(x)", "F.relu(x)", "x.relu()", "torch.nn.functional.relu(x)",
    ]  # fmt: skip
    template = (
        "import torch\nimport torch.nn.functional as F\n\nclass Model:\n    def forward(self, x):\n        return {}\n"
    )
    assert {torch_ops(template.format(s)) for s in spellings} == {frozenset({"relu"})}
    assert torch_ops(template.format("a @ b")) == torch_ops(template.format("torch.matmul(a, b)")) == {"matmul"}
    assert torch_ops(template.format("self.act(x)")) == frozenset()
    assert decontam.op_name("nn.CrossEntropyLoss") == decontam.op_name("F.cross_entropy") == "crossentropy"


def test_a_problem_that_does_not_parse_is_an_error_naming_it():
    with pytest.raises(decontam.DecontamError, match=r"t:level1/bad: not valid Python \(line 1"):
        decontaminate([problem("bad", "def (:\n")], [problem("ok", SIGMOID)])


def test_report_json_carries_counts_constants_and_pairs():
    train = [problem("3_Sigmoid", SIGMOID, suite="builtin")]
    heldout = [problem("25_Silu", SILU, suite="kb"), problem("9_Conv", CONV_GROUPNORM, level=2, suite="kb")]
    row = decontaminate(train, heldout).to_json()
    assert row["counts"] == {
        "heldout": 2, "contaminated": 1, "clean": 1, "train": 1, "near_duplicate_pairs": 1, "near_duplicate_train": 1,
    }  # fmt: skip
    assert row["rule"]["similarity"] == SIMILARITY and row["rule"]["same_ops_similarity"] == SAME_OPS_SIMILARITY
    (pair,) = row["contaminated"]["kb:level1/25_Silu"]
    assert pair["train"] == "builtin:level1/3_Sigmoid" and pair["near_duplicate"] and pair["rule"] == "similarity"
    nearest = row["clean"]["kb:level2/9_Conv"]
    assert nearest["train"] == "builtin:level1/3_Sigmoid" and not nearest["near_duplicate"]


# -- kz decontam --------------------------------------------------------------------------------------------
def write_suite(root: Path, files: dict[str, str]) -> Path:
    (root / "level1").mkdir(parents=True)
    for name, source in files.items():
        (root / "level1" / f"{name}.py").write_text(source)
    return root


def test_kz_decontam_on_two_temporary_suites(tmp_path):
    train = write_suite(tmp_path / "train", {"3_Sigmoid": SIGMOID})
    heldout = write_suite(tmp_path / "heldout", {"1_Silu": SILU, "2_Conv3d_GroupNorm": CONV_GROUPNORM})
    out = tmp_path / "reports" / "decontam.json"
    proc = kz("decontam", "--train", str(train), "--heldout", str(heldout), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "held-out problems: 2, contaminated: 1, clean: 1"
    assert lines[2] == f"rule: similarity >= {SIMILARITY}, or the same op set and similarity >= {SAME_OPS_SIMILARITY}"
    assert any("heldout:level1/1_Silu  ~  train:level1/3_Sigmoid" in line for line in lines)
    assert lines[-1] == f"report: {out}"
    row = json.loads(out.read_text())
    assert (row["train"], row["heldout"]) == ([str(train)], [str(heldout)])
    assert row["counts"]["contaminated"] == 1 and list(row["clean"]) == ["heldout:level1/2_Conv3d_GroupNorm"]
    assert row["contaminated"]["heldout:level1/1_Silu"][0]["similarity"] >= SIMILARITY


def test_kz_decontam_builtin_against_kernelbench_level1():
    """The vendored KernelBench level 1 against the built-in suite: the activations and matmuls the suite
    copies are contaminated, problems it has nothing like stay clean."""
    proc = kz("decontam", "--train", "builtin", "--heldout", "kernelbench:1")  # kz_suites' copy: no checkout
    assert proc.returncode == 0, proc.stderr
    counts = proc.stdout.splitlines()[0]
    assert counts.startswith("held-out problems: 100, contaminated: ")
    contaminated = int(counts.split("contaminated: ")[1].split(",")[0])
    assert 20 <= contaminated <= 60 and counts.endswith(f"clean: {100 - contaminated}")
    pairs = [" ".join(line.split()) for line in proc.stdout.splitlines()[4:]]
    assert "0.983 kernelbench:level1/19_ReLU ~ builtin:level1/1_ReLU (same ops)" in pairs


def test_kz_decontam_errors_are_one_line(tmp_path):
    proc = kz("decontam", "--train", "no-such-suite", "--heldout", "builtin:1")
    assert proc.returncode == 1
    assert "'no-such-suite' is neither a path nor a suite" in error_line(proc)
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"\xff\xfe not text\n")
    proc = kz("decontam", "--train", "builtin:1", "--heldout", str(bad))
    assert proc.returncode == 1
    assert error_line(proc).startswith(f"kz: error: {bad}: cannot read it")
    proc = kz("decontam", "--train", f"pool:{tmp_path / 'none.jsonl'}", "--heldout", "builtin:1")
    assert proc.returncode == 1 and "no such task pool file" in error_line(proc)
    (tmp_path / "file").write_text("")
    proc = kz("decontam", "--train", "builtin:1", "--heldout", "builtin:2", "--out", str(tmp_path / "file" / "r.json"))
    assert proc.returncode == 1 and "cannot write the report" in error_line(proc)
    proc = kz("decontam", "--train", "builtin:1")
    assert proc.returncode == 2 and "--heldout" in proc.stderr  # argparse: a required option missing


# -- the trainer ---------------------------------------------------------------------------------------------
def trainer_config(tmp_path, mode: str, **problems):
    from kzcore.train.config import HeldoutSection, ModelsSection, ProblemsSection, TrainConfig

    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    cfg = TrainConfig(
        models=ModelsSection(coder=str(model)),
        problems=ProblemsSection(
            **{"coldstart": "builtin", "tasks": "builtin:1", "heldout": "builtin:1", **problems},
            heldout_names=("1_ReLU", "3_Sigmoid"),
        ),
        heldout=HeldoutSection(decontaminate=mode),
    )
    return attrs.evolve(cfg, run=attrs.evolve(cfg.run, dir=str(tmp_path / "run")))


def test_config_key_is_checked(tmp_path):
    from kzcore.train.config import ConfigError, load_config

    path = tmp_path / "c.toml"
    path.write_text('[heldout]\ndecontaminate = "drop-train"\n')
    assert load_config(path).heldout.decontaminate == "drop-train"
    path.write_text('[heldout]\ndecontaminate = "yes"\n')
    with pytest.raises(ConfigError, match="decontaminate must be one of 'off', 'report', 'drop-train', got 'yes'"):
        load_config(path)


def test_drop_train_leaves_near_duplicates_out_and_report_keeps_them(tmp_path):
    """Held out: 1_ReLU and 3_Sigmoid. Among the built-in training problems 2_GELU and 5_Softplus are the same
    module with another activation: "report" records them, "drop-train" also leaves them out of the cold start
    and the tasks. The report goes to RUN/decontamination.json when the run starts."""
    from kzcore.train.tasks import DECONTAMINATION
    from kzcore.train.trainer import Trainer

    off = Trainer(trainer_config(tmp_path, "off"), log=lambda s: None)
    assert off.problems.decontam is None and len(off.problems.coldstart) == 38
    report = Trainer(trainer_config(tmp_path, "report"), log=lambda s: None)
    assert sorted(p.name for p in report.problems.decontam.near_train) == ["2_GELU", "5_Softplus"]
    assert report.problems.decontam.counts()["contaminated"] == 2 and report.problems.decontam.clean == []
    assert len(report.problems.coldstart) == 38 and len(report.problems.tasks) == 25
    drop = Trainer(trainer_config(tmp_path, "drop-train"), log=lambda s: None)
    names = {p.name for p in drop.problems.coldstart} | {p.name for p in drop.problems.tasks}
    assert len(drop.problems.coldstart) == 36 and len(drop.problems.tasks) == 23
    assert not names & {"2_GELU", "5_Softplus"}
    drop.context.run_dir.mkdir(parents=True)
    path = drop.problems.write_decontamination()
    assert path == drop.context.run_dir / DECONTAMINATION
    row = json.loads(path.read_text())
    assert row["mode"] == "drop-train" and row["counts"]["clean"] == 0
    assert row["dropped_train"] == ["builtin:level1/2_GELU", "builtin:level1/5_Softplus"]


def test_drop_train_leaves_near_duplicate_pool_modules_out_of_the_coder_tasks(tmp_path):
    from kzcore.proposer.gates import GATE_ORDER, GateResult
    from kzcore.proposer.pool import TaskRecord, append_records
    from kzcore.train.trainer import Trainer

    trainer = Trainer(trainer_config(tmp_path, "drop-train"), log=lambda s: None)
    trainer.context.run_dir.mkdir(parents=True)
    ok = {g: GateResult(True) for g in GATE_ORDER}
    records = [
        TaskRecord(id="silu", apis=("F.silu",), level=1, code=SILU, gates=ok, provenance={"round": 1}),
        TaskRecord(id="conv", apis=("nn.Conv3d",), level=2, code=CONV_GROUPNORM, gates=ok, provenance={"round": 1}),
    ]
    append_records(trainer.problems.pool_path, records)
    assert trainer.problems.pool_near_heldout(records) == {"proposed_silu"}
    tasks, sources = trainer.problems.coder_tasks(4, round=1)
    assert {p.name for p in tasks} == {"proposed_conv"} and sources == {"newest": 4}


def test_held_out_scores_on_the_clean_problems_come_from_the_same_results(tmp_path, monkeypatch):
    from kzcore.train import scoring
    from kzcore.types import EvalResult, Status

    problems = [problem("1_A", SIGMOID), problem("2_B", SILU), problem("3_C", CONV_GROUPNORM)]
    results = [
        EvalResult(
            problem=p.name, language="triton", level=1, sample=s, status=Status.CORRECT if ok else Status.INCORRECT
        )
        for p, oks in zip(problems, [(True, True), (False, False), (True, False)])
        for s, ok in enumerate(oks)
    ]
    monkeypatch.setattr(scoring, "sample_and_evaluate", lambda *a, **k: results)
    config = trainer_config(tmp_path, "report")
    trainer = types.SimpleNamespace(config=attrs.evolve(config, heldout=attrs.evolve(config.heldout, n=2, k=(1,))))
    metrics = scoring.score_problems(trainer, None, problems, "triton", tmp_path, "here", "heldout", clean=problems[1:])
    assert metrics["heldout_triton_pass@1"] == pytest.approx(0.5)  # (1 + 0 + 0.5) / 3
    assert metrics["heldout_triton_clean_problems"] == 2
    assert metrics["heldout_triton_clean_pass@1"] == pytest.approx(0.25)  # (0 + 0.5) / 2
    plain = scoring.score_problems(trainer, None, problems, "triton", tmp_path, "here", "heldout")
    assert not any("clean" in key for key in plain)


def test_the_plan_shows_the_counts(plugins, tmp_path):
    from kzcore.train.plan import format_plan, training_plan

    pm = plugins("kz_triton", "kz_models")
    config = trainer_config(tmp_path, "drop-train")
    plan = training_plan(config, 1, pm=pm)
    d = plan["decontaminate"]
    assert (d["mode"], d["heldout"], d["contaminated"], d["clean"]) == ("drop-train", 2, 2, 0)
    assert d["dropped_train"] == ["builtin:level1/2_GELU", "builtin:level1/5_Softplus"]
    line = next(line for line in format_plan(plan) if line.startswith("decontamination"))
    assert line.startswith("decontamination (drop-train): 2 of 2 held-out problems near-duplicate one of ")
    assert line.endswith("; 2 training problems left out")
    off = training_plan(attrs.evolve(config, heldout=attrs.evolve(config.heldout, decontaminate="off")), 1, pm=pm)
    assert off["decontaminate"] == {"mode": "off"}
    assert not any(line.startswith("decontamination") for line in format_plan(off))


class InProcessChecks:
    """Runs the real problem check (kzcore.evaluate.problem_check) in this process, for the trainer's held-out
    check: what a worker pool would do with each job, without starting one."""

    device = "cpu"

    def __init__(self, workdir):
        self.workdir, self.jobs = workdir, 0

    def map(self, jobs):
        from kzcore.evaluate.problem_check import check_problem_job

        for job in jobs:
            self.jobs += 1
            yield check_problem_job(job, self.workdir, "cpu")[0]


ZEROS = SIGMOID.replace("return torch.sigmoid(x)", "return torch.zeros_like(x)")
BROKEN = SIGMOID.replace("return torch.sigmoid(x)", 'raise RuntimeError("no reference here")')


def test_held_out_problems_the_problem_check_flags_are_left_out_before_sampling_and_recorded(tmp_path):
    """A held-out problem whose output is all zeros (any kernel writing zeros would pass it) is left out of the
    problems a checkpoint is scored on, before any sampling; RUN/heldout-problems.json names it with the
    reason, and a resumed run reads the set back instead of checking again."""
    from kzcore.train.context import RunContext
    from kzcore.train.tasks import HELDOUT_CHECK, RunProblems

    assert ZEROS != SIGMOID
    config = trainer_config(tmp_path, "off")
    config = attrs.evolve(config, eval=attrs.evolve(config.eval, device="cpu"))
    pool, lines = InProcessChecks(tmp_path), []
    context = RunContext(config, log=lines.append, executor=pool)
    context.run_dir.mkdir(parents=True)
    heldout = [problem("1_Sigmoid", SIGMOID), problem("2_Zeros", ZEROS), problem("3_Broken", BROKEN)]
    problems = RunProblems(context, heldout, coldstart=[])
    assert [p.name for p in problems.scored_heldout()] == ["1_Sigmoid", "3_Broken"]
    record = json.loads((context.run_dir / HELDOUT_CHECK).read_text())
    assert record["problems"] == ["t:level1/1_Sigmoid", "t:level1/2_Zeros", "t:level1/3_Broken"]
    assert record["problem_check"] is True
    assert list(record["flagged"]) == ["t:level1/2_Zeros"] and "zeros" in record["flagged"]["t:level1/2_Zeros"]
    # no verdict (its reference does not run): kept, since its candidates' results say what happened, and named
    assert (
        list(record["unchecked"]) == ["t:level1/3_Broken"]
        and "does not run" in record["unchecked"]["t:level1/3_Broken"]
    )
    assert len(lines) == 2 and lines[0].startswith("held-out: 1 of 3 problems fail the problem check")
    assert lines[1].startswith("held-out: the problem check reached no verdict on 1 of 3 problems; they are kept")
    checked = pool.jobs
    again = RunProblems(RunContext(config, log=lines.append, executor=pool), heldout, coldstart=[])
    assert [p.name for p in again.scored_heldout()] == ["1_Sigmoid", "3_Broken"] and pool.jobs == checked  # read back

    off = attrs.evolve(config, eval=attrs.evolve(config.eval, problem_check=False))
    every = RunProblems(RunContext(off, log=lines.append, executor=pool), heldout, coldstart=[])
    assert [p.name for p in every.scored_heldout()] == ["1_Sigmoid", "2_Zeros", "3_Broken"] and pool.jobs == checked
    assert json.loads((context.run_dir / HELDOUT_CHECK).read_text())["flagged"] == {}
