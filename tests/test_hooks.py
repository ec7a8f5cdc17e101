"""One test per hook in kzcore/hookspecs.py (named ``test_<hook>``), each registering a fake plugin from
tests/fakes_hooks.py and showing that the core honours it; plus meta-tests that keep this file and
docs/hooks.md in step with the hookspecs, the UnknownLanguageError message, and KZ_TRACE_PLUGINS."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
from pathlib import Path

import pytest

from kz_suites import BUILTIN_SUITE
from kzcore import hookspecs
from kzcore.builtins import timing as default_timing
from kzcore.builtins.extraction import extract_source
from kzcore.errors import KzError, ProblemFormatError, UnknownLanguageError
from kzcore.evaluate.runner import evaluate
from kzcore.executors.local import LocalPool
from kzcore.plugins import languages, new_plugin_manager, plugin_specs, policies, require_language, suites
from kzcore.problems import load_problems, load_solutions
from kzcore.prompts import build_prompt
from kzcore.results import read_results
from kzcore.types import Candidate, EvalConfig, Phase, ProblemCheckJob, Status
from tests import fakes_hooks

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
CFG = EvalConfig(trials=2, timeout_s=60)
FAKES = "tests.fakes_hooks"

PY_RELU = """import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""

PY_CLAMP = PY_RELU.replace("torch.relu(x)", "x.clamp_min(0.0)")
PY_WRONG = PY_RELU.replace("torch.relu(x)", "torch.sigmoid(x)")


def hook_names() -> list[str]:
    return [name for name, fn in vars(hookspecs).items() if callable(fn) and hasattr(fn, "kzcore_spec")]


@pytest.fixture(scope="module")
def relu():
    return next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")


def py_candidate(sample: int, source: str | None = None, completion: str | None = None) -> Candidate:
    return Candidate(problem="1_ReLU", language="python", level=1, sample=sample, source=source, completion=completion)


def run(pm, problem, candidates, tmp_path, **kwargs) -> dict[int, object]:
    results = evaluate([problem], candidates, CFG, tmp_path / "r.jsonl", workers=1, pm=pm, **kwargs)
    assert len(results) == len(candidates)
    return {r.sample: r for r in results}


# ----------------------------------------------------------------------------------------------------
# registration
# ----------------------------------------------------------------------------------------------------


def test_kz_register_languages(plugins, relu, tmp_path):
    pm = plugins()
    with pytest.raises(UnknownLanguageError):
        require_language("fakelang", pm)
    # the evaluator refuses an unregistered language before any worker starts
    cand = Candidate(problem="1_ReLU", language="fakelang", level=1, source="class ModelNew: pass\n")
    with pytest.raises(UnknownLanguageError, match="fakelang"):
        evaluate([relu], [cand], CFG, tmp_path / "r.jsonl", workers=1, pm=pm)
    assert not (tmp_path / "r.jsonl").exists()

    pm = plugins(f"{FAKES}:FAKE_LANGUAGE")
    lang = require_language("fakelang", pm)
    assert lang.name == "fakelang" and lang.needs_gpu is True
    assert languages(pm).owners["fakelang"] == f"{FAKES}:FAKE_LANGUAGE"


def test_kz_register_executors(plugins, relu, tmp_path, monkeypatch):
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))  # its problem check must run, not come from a cache
    pm = plugins("kz_pylang", f"{FAKES}:FAKE_EXECUTORS")
    fakes_hooks.InlineExecutor.instances.clear()
    cands = [py_candidate(0, PY_RELU), py_candidate(1, PY_WRONG)]
    # The inline executor implements exactly what the hookspec documents: map(jobs) and close().
    results = evaluate([relu], cands, CFG, tmp_path / "r.jsonl", executor="inline", workers=3, pm=pm)
    assert {r.sample: r.message for r in results} == {
        0: "answered by the inline executor",
        1: "answered by the inline executor",
    }
    (executor,) = fakes_hooks.InlineExecutor.instances
    assert executor.workers == 3 and executor.config == CFG and executor.closed
    assert executor.plugins == plugin_specs(pm)
    # kz eval's problem check goes through the same executor (once per problem, before the candidates)
    checks = [j for j in executor.jobs if isinstance(j, ProblemCheckJob)]
    assert [j.problem.key for j in checks] == [relu.key]
    assert [j.candidate.sample for j in executor.jobs if j not in checks] == [0, 1]
    assert {r.key for r in read_results(tmp_path / "r.jsonl")} == {c.key for c in cands}
    with pytest.raises(KzError, match="no executor named 'nope'; installed: inline, local"):
        evaluate([relu], [py_candidate(2, PY_RELU)], CFG, tmp_path / "r2.jsonl", executor="nope", pm=pm)


def test_kz_register_policies(plugins):
    from kzcore.policy import load_policy

    pm = plugins()
    with pytest.raises(KzError, match="no policy named 'echo'; installed: none"):
        policies(pm).get("echo")
    pm = plugins(f"{FAKES}:FAKE_POLICIES")
    registry = policies(pm)
    policy = registry.get("echo")("model-x")
    assert isinstance(policy, fakes_hooks.EchoPolicy)
    assert policy.complete(["hi"]) == ["echo(model-x): hi"]
    assert registry.owners["echo"] == f"{FAKES}:FAKE_POLICIES"
    via_spec = load_policy("echo:model-y", pm=pm)  # the path --policy NAME:ARG takes
    assert via_spec.complete(["x"]) == ["echo(model-y): x"]


def test_kz_register_commands(plugins, monkeypatch, capsys):
    from kzcore import cli
    from kzcore.plugins import commands

    assert "greet" not in cli.build_parser(plugins()).format_help()
    pm = plugins(f"{FAKES}:FAKE_COMMANDS")
    assert commands(pm).owners["greet"] == f"{FAKES}:FAKE_COMMANDS"
    parser = cli.build_parser(pm)
    assert "greet" in parser.format_help()
    monkeypatch.setattr("kzcore.plugins.get_plugin_manager", lambda: pm)
    assert cli.main(["greet", "world", "--shout"]) == 3
    assert capsys.readouterr().out == "HELLO WORLD\n"
    assert cli.main(["greet", "nobody"]) == 1  # a KzError from a plugin command: one line, as for built-ins
    assert capsys.readouterr().err == "kz: error: nobody to greet\n"


def test_a_name_registered_twice_names_both_plugins(plugins, monkeypatch, capsys):
    from kzcore import cli
    from kzcore.plugins import commands

    pm = plugins(f"{FAKES}:FAKE_COMMANDS", f"{FAKES}:CLASHING_COMMANDS")
    with pytest.raises(
        KzError,
        match="command 'greet' is registered by plugins .*(FAKE|CLASHING)_COMMANDS.* and .*(FAKE|CLASHING)_COMMANDS",
    ):
        commands(pm)
    monkeypatch.setattr("kzcore.plugins.get_plugin_manager", lambda: pm)
    assert cli.main(["greet", "x"]) == 1
    assert "is registered by plugins" in capsys.readouterr().err
    # a built-in command's name is refused too, naming the plugin
    monkeypatch.setattr(fakes_hooks.CLASHING_COMMANDS, "name", "eval")
    with pytest.raises(KzError, match=r"plugin '.*CLASHING_COMMANDS' registers command 'eval', which is a built-in"):
        cli.build_parser(plugins())
    # the same rule for every registry: a second plugin's suite named like kz_suites' one
    with pytest.raises(KzError, match=r"suite 'builtin' is registered by plugins '.*' and '.*'"):
        suites(plugins(f"{FAKES}:SECOND_BUILTIN_SUITE"))


def test_kz_register_suites(plugins, relu, tmp_path, monkeypatch):
    root = tmp_path / "suite"
    (root / "level1").mkdir(parents=True)
    (root / "level2").mkdir()
    (root / "solutions" / "python" / "level1").mkdir(parents=True)
    problem = Path(relu.path).read_text()
    (root / "level1" / "1_A.py").write_text(problem)
    (root / "level2" / "1_B.py").write_text(problem)
    (root / "solutions" / "python" / "level1" / "1_A.py").write_text(PY_RELU)
    monkeypatch.setattr(fakes_hooks.FAKE_SUITES, "path", root)

    pm = plugins()
    with pytest.raises(ProblemFormatError, match="neither a path nor a suite"):
        load_problems("mysuite", pm=pm)
    pm = plugins(f"{FAKES}:FAKE_SUITES")
    assert suites(pm).owners["mysuite"] == f"{FAKES}:FAKE_SUITES"
    problems = load_problems("mysuite", pm=pm)
    assert [(p.level, p.name, p.suite) for p in problems] == [(1, "1_A", "mysuite"), (2, "1_B", "mysuite")]
    assert [p.name for p in load_problems("mysuite:2", pm=pm)] == ["1_B"]
    (cand,) = load_solutions("mysuite", problems, "python", pm=pm)
    assert (cand.problem, cand.level, cand.source) == ("1_A", 1, PY_RELU)


# ----------------------------------------------------------------------------------------------------
# kernel pipeline
# ----------------------------------------------------------------------------------------------------


def test_kz_extract_source(plugins, relu, tmp_path, own_workers):
    tagged = f"Here you go.\n<code>\n{PY_RELU}</code>\nDone."
    assert extract_source(tagged).startswith("Here you go.")  # the default keeps the tags: not importable
    pm = plugins("kz_pylang", f"{FAKES}:TAG_EXTRACTOR")
    fenced = f"Answer:\n```python\n{PY_RELU}```\n"
    results = run(pm, relu, [py_candidate(0, completion=tagged), py_candidate(1, completion=fenced)], tmp_path)
    assert results[0].status is Status.CORRECT, results[0].message
    assert results[1].status is Status.CORRECT, results[1].message  # the fake returned None: the default ran
    assert "extract" in results[0].stages


def test_kz_static_check(plugins, relu, tmp_path, own_workers):
    pm = plugins("kz_pylang", f"{FAKES}:BANNING_STATIC_CHECK")
    results = run(pm, relu, [py_candidate(0, PY_RELU), py_candidate(1, PY_CLAMP)], tmp_path)
    assert results[0].status is Status.STATIC_CHECK_FAILED
    assert "fake check: torch.relu is banned" in results[0].message
    assert results[1].status is Status.CORRECT, results[1].message  # [] means the source passes


def test_kz_load_candidate(plugins, relu, tmp_path, own_workers):
    pm = plugins("kz_pylang", f"{FAKES}:FOREIGN_LOADER")
    not_python = "class ModelNew <<< a foreign language the fake loader compiles >>>\n"
    broken = "class ModelNew BROKEN\n"
    results = run(pm, relu, [py_candidate(0, not_python), py_candidate(1, broken)], tmp_path)
    assert results[0].status is Status.CORRECT, results[0].message  # the loader's module ran, not the file
    assert results[1].status is Status.COMPILE_ERROR
    assert results[1].message == "fake compiler: BROKEN is not a valid instruction"


def test_kz_instrument_candidate(plugins, relu, tmp_path, own_workers):
    pm = plugins("kz_pylang", f"{FAKES}:LAUNCH_COUNTER")
    five, none = PY_RELU + "\nKZ_FAKE_LAUNCHES = 5\n", PY_RELU + "\nKZ_FAKE_LAUNCHES = 0\n"
    results = run(pm, relu, [py_candidate(0, five), py_candidate(1, none)], tmp_path)
    assert results[0].status is Status.CORRECT, results[0].message
    assert results[0].launches == 5
    assert results[1].status is Status.HACK_SUSPECTED
    assert "launched none of the candidate's own python kernels" in results[1].message


def test_kz_kernel_names(plugins, tmp_path):
    import shutil

    pm = plugins("kz_triton", "kz_cuda")
    solutions = BUILTIN_SUITE / "solutions"
    names = {}
    for language in ("triton", "cuda"):
        path = tmp_path / f"kz_candidate_names_{language}.py"
        shutil.copy(solutions / language / "level1" / "11_Softmax.py", path)
        module = pm.hook.kz_load_candidate(language=language, path=path, device="cpu")
        names[language] = pm.hook.kz_kernel_names(language=language, module=module)
    assert names["triton"] == ["softmax_kernel"]
    assert names["cuda"] and all(n in (tmp_path / "kz_candidate_names_cuda.py").read_text() for n in names["cuda"])
    assert pm.hook.kz_kernel_names(language="python", module=module) is None  # not these plugins' language


def test_kz_precompile(plugins, relu, tmp_path, own_workers):
    pm = plugins("kz_pylang", f"{FAKES}:PRECOMPILER")
    # forward is only right when the plugin precompiled the model for this very input shape
    checked = PY_RELU.replace(
        "        return torch.relu(x)",
        "        if getattr(self, 'precompiled_for', None) != [tuple(x.shape)]:\n"
        "            return torch.zeros_like(x)\n"
        "        return torch.relu(x)",
    )
    failing = checked.replace("class ModelNew(nn.Module):", "class ModelNew(nn.Module):\n    precompile_fails = True\n")
    results = run(pm, relu, [py_candidate(0, checked), py_candidate(1, failing)], tmp_path)
    assert results[0].status is Status.CORRECT, results[0].message
    assert "precompile" in results[0].stages
    assert results[1].status is Status.COMPILE_ERROR
    assert results[1].message == "fake precompiler: this kernel does not compile"
    # without a plugin implementing it, nothing changes: the shapes are never recorded, forward gives zeros
    pm.unregister(name=f"{FAKES}:PRECOMPILER")
    results = run(pm, relu, [py_candidate(0, checked)], tmp_path / "plain")
    assert results[0].status is Status.INCORRECT


def test_kz_run_forward(plugins, relu, tmp_path, own_workers):
    pm = plugins("kz_pylang", f"{FAKES}:ALT_FORWARD")
    # __call__ returns zeros (wrong); only the plugin's way of running the model gives ReLU.
    source = PY_RELU.replace("def forward(self, x):", "def plugin_forward(self, x):") + (
        "\n    def forward(self, x):\n        return torch.zeros_like(x)\n"
    )
    results = run(pm, relu, [py_candidate(0, source)], tmp_path)
    assert results[0].status is Status.CORRECT, results[0].message


def test_kz_check_outputs(plugins, relu, tmp_path, own_workers):
    pm = plugins("kz_triton", f"{FAKES}:REJECT_ALL_OUTPUTS")
    problems = [relu]
    candidates = load_solutions("builtin", problems, "triton", pm=pm)
    assert len(candidates) == 1
    results = run(pm, relu, candidates, tmp_path)
    assert results[0].status is Status.INCORRECT
    assert results[0].message == "trial 0: fake check rejects every output"
    assert (results[0].max_abs_err, results[0].max_rel_err) == (0.25, 0.5)


def test_kz_time_candidate(plugins, relu, tmp_path, own_workers):
    # The CPU default measures nothing, so any figures in the result come from the fake.
    default = default_timing.kz_time_candidate(device="cpu", reference=None, candidate=None, config=CFG, rounds=None)
    assert default.speedup is None
    pm = plugins("kz_pylang", f"{FAKES}:FIXED_TIMER")
    r = run(pm, relu, [py_candidate(0, PY_RELU)], tmp_path)[0]
    assert r.status is Status.CORRECT, r.message
    assert (r.ref_ms, r.cand_ms, r.speedup, r.timing_reps) == (2.0, 0.5, 4.0, 7)
    assert (r.ref_spread, r.cand_spread, r.timing_note) == (0.01, 0.02, "fixed timer on cpu")
    assert r.timed_checks == 1
    # its phases are booked as parts of the timing stage
    assert (r.stages["timing.pairs"], r.stages["timing.wait"]) == (0.25, 0.125) and r.stages["timing"] > 0
    # A timer that leaves the rounds alone checks no timed output: its figures are refused, with a message
    pm = plugins("kz_pylang", f"{FAKES}:UNCHECKED_TIMER")
    (tmp_path / "unchecked").mkdir()
    r = run(pm, relu, [py_candidate(0, PY_RELU)], tmp_path / "unchecked")[0]
    assert r.status is Status.RUNTIME_ERROR and r.speedup is None
    assert "did not check its last timed pair" in r.message


def test_kz_result_filed(plugins, relu, tmp_path, own_workers):
    recorder = fakes_hooks.RESULT_RECORDER
    recorder.results.clear()
    pm = plugins("kz_pylang", f"{FAKES}:RESULT_RECORDER")
    cands = [py_candidate(0, PY_RELU), py_candidate(1, PY_WRONG), py_candidate(2, "no model here\n")]
    results = evaluate([relu], cands, CFG, tmp_path / "r.jsonl", workers=1, pm=pm)
    assert sorted(r.status for r in recorder.results) == sorted(
        [Status.CORRECT, Status.INCORRECT, Status.STATIC_CHECK_FAILED]
    )
    assert recorder.results == results
    assert sorted(recorder.results, key=lambda r: r.key) == sorted(
        read_results(tmp_path / "r.jsonl"), key=lambda r: r.key
    )
    # resuming files nothing new, so the hook is not called again
    again = evaluate([relu], cands, CFG, tmp_path / "r.jsonl", workers=1, pm=pm)
    assert len(again) == 3 and len(recorder.results) == 3


# ----------------------------------------------------------------------------------------------------
# prompting
# ----------------------------------------------------------------------------------------------------


def test_kz_prompt_sections(plugins, relu):
    pm = plugins(f"{FAKES}:EXTRA_SECTION")
    system, user = build_prompt(relu, "fakelang", pm=pm)
    assert system["role"] == "system" and user["role"] == "user"
    body = user["content"]
    assert "## Fake hints\n\nhints for 1_ReLU (kernelbench)" in body
    assert body.index("## Task") < body.index("## Fake hints") < body.index("## Architecture to optimize")
    # the fake returns None for other languages, which the core skips
    assert "Fake hints" not in build_prompt(relu, "triton", pm=pm)[1]["content"]


def test_kz_format_prompt(plugins, relu):
    pm = plugins(f"{FAKES}:EXTRA_SECTION", f"{FAKES}:TITLES_ONLY_FORMATTER")
    messages = build_prompt(relu, "fakelang", template="principles", pm=pm)
    assert messages == [
        {"role": "user", "content": "Task | Fake hints | Optimisation principles | Architecture to optimize"}
    ]


# ----------------------------------------------------------------------------------------------------
# lifecycle
# ----------------------------------------------------------------------------------------------------
# kz_phase_start / kz_phase_end are fired by kzcore.train.schedule.run_schedule at every phase boundary.


def test_kz_phase_start(plugins, tmp_path):
    from kzcore.train.schedule import Schedule, run_schedule

    recorder = fakes_hooks.PHASE_RECORDER
    recorder.events.clear()
    pm = plugins(f"{FAKES}:PHASE_RECORDER")
    schedule = Schedule(rounds=2, proposer_steps=0, coder_steps=50, cold_start=False)
    run_schedule(schedule, {"coder": lambda ph, d: {}}, tmp_path, pm=pm, log=lambda s: None)
    starts = [e[1] for e in recorder.events if e[0] == "start"]
    assert starts == [Phase(role="coder", round=1, steps=50), Phase(role="coder", round=2, steps=50)]


def test_kz_phase_end(plugins, tmp_path):
    from kzcore.train.schedule import Schedule, run_schedule

    recorder = fakes_hooks.PHASE_RECORDER
    recorder.events.clear()
    pm = plugins(f"{FAKES}:PHASE_RECORDER")
    schedule = Schedule(rounds=1, proposer_steps=10, coder_steps=0, cold_start=False)
    run_schedule(schedule, {"proposer": lambda ph, d: {"reward_mean": 0.5}}, tmp_path, pm=pm, log=lambda s: None)
    ((kind, phase, metrics),) = recorder.events[1:]
    assert (kind, phase) == ("end", Phase(role="proposer", round=1, steps=10))
    assert metrics["reward_mean"] == 0.5 and metrics["seconds"] >= 0


def test_kz_fast_generate(plugins, tmp_path, monkeypatch):
    trl = pytest.importorskip("trl")
    from types import SimpleNamespace

    from kzcore.train import coder

    fake = fakes_hooks.FAST_GENERATE
    fake.offered.clear()
    pm = plugins(f"{FAKES}:FAST_GENERATE")
    seen = []

    class FakeGRPOTrainer:
        """What run_grpo touches of TRL's GRPOTrainer: train() generates once through ``model.generate``."""

        fast_ok = True

        def __init__(self, model, reward_funcs, args, train_dataset, callbacks=()):
            self.model = SimpleNamespace(generate=lambda **kwargs: "slow", fast_ok=FakeGRPOTrainer.fast_ok)
            self.args, self.state = args, SimpleNamespace(global_step=1, log_history=[], num_input_tokens_seen=0)
            self.processing_class = SimpleNamespace(save_pretrained=lambda path: None)

        def add_callback(self, callback):
            """run_grpo adds its checkpoint callback here; the fake never calls it."""

        def is_world_process_zero(self):
            return True

        def train(self, resume_from_checkpoint=None):
            seen.append(self.model.generate(input_ids=None))

        def save_model(self, path):
            """run_grpo saves the phase's model here; the fake has no weights to write."""

    monkeypatch.setattr(trl, "GRPOTrainer", FakeGRPOTrainer)
    coder.run_grpo("model", [], [], coder.GRPOSettings(use_cpu=True), tmp_path, pm=pm)
    FakeGRPOTrainer.fast_ok = False  # the plugin declines this model: transformers' generate stays
    coder.run_grpo("model", [], [], coder.GRPOSettings(use_cpu=True), tmp_path, pm=pm)
    assert seen == [("fast", "slow"), "slow"]
    # the plugin got the model and the core's generate (which wraps the model's own)
    assert [model.fast_ok for model, _ in fake.offered] == [True, False]
    assert all(generate(input_ids=None) == "slow" for _, generate in fake.offered)


def test_kz_worker_started(tmp_path, monkeypatch, own_workers):
    monkeypatch.setenv(fakes_hooks.MARKER_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("KZ_SANDBOX_WRITABLE", str(tmp_path))  # workers may write only where they are told
    pool = LocalPool(workers=1, config=EvalConfig(device="cpu"), plugins=[f"{FAKES}:WORKER_MARKER"])
    try:
        pool.start()
        (marker,) = tmp_path.glob("*.started")
        pid = int(marker.name.split(".")[0])
        assert pid != os.getpid()
        assert pid == pool.info["pid"] == pool.workers[0].proc.pid
        assert set(pool.info["start_s"]) == {"fences", "torch", "plugins", "warm_up"}  # start-up phases, timed
        assert marker.read_text() == "cpu"
    finally:
        pool.close()


# ----------------------------------------------------------------------------------------------------
# errors and tracing
# ----------------------------------------------------------------------------------------------------


def test_unknown_language_error_names_installed_languages(plugins):
    with pytest.raises(UnknownLanguageError, match=r"no plugin handles language 'cuda'; installed languages: none"):
        require_language("cuda", plugins())
    pm = plugins("kz_triton", "kz_pylang")
    with pytest.raises(UnknownLanguageError) as info:
        require_language("cuda", pm)
    assert str(info.value) == "no plugin handles language 'cuda'; installed languages: python, triton"
    assert isinstance(info.value, KzError)  # the CLI turns it into one line on stderr
    assert require_language("triton", pm).name == "triton"


def test_trace_plugins_env_traces_hook_calls(monkeypatch, capsys):
    monkeypatch.delenv("KZ_TRACE_PLUGINS", raising=False)
    new_plugin_manager(load_entry_points=False).hook.kz_extract_source(language="triton", completion="untraced")
    assert "kz_extract_source" not in capsys.readouterr().err
    monkeypatch.setenv("KZ_TRACE_PLUGINS", "1")
    pm = new_plugin_manager(load_entry_points=False)
    pm.hook.kz_extract_source(language="triton", completion="hello tracer")
    err = capsys.readouterr().err
    assert "kz_extract_source [hook]" in err
    assert "completion: 'hello tracer'" in err
    assert "finish kz_extract_source" in err


# ----------------------------------------------------------------------------------------------------
# meta-tests
# ----------------------------------------------------------------------------------------------------


def test_hookspecs_are_the_hooks_the_manager_knows():
    pm = new_plugin_manager(load_entry_points=False)
    names = hook_names()
    assert len(names) >= 17
    assert sorted(names) == sorted(n for n in dir(pm.hook) if n.startswith("kz_"))


def test_every_hook_has_a_test():
    tests = set()
    for path in [*TESTS.rglob("test_*.py"), *TESTS.parent.glob("plugins/*/tests/test_*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                tests.add(node.name)
    missing = [name for name in hook_names() if f"test_{name}" not in tests]
    assert not missing, f"hooks without a test named test_<hook>: {missing}"


def _gen_hooks_doc():
    spec = importlib.util.spec_from_file_location("gen_hooks_doc", ROOT / "scripts" / "gen_hooks_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hooks_doc_matches_hookspecs():
    gen = _gen_hooks_doc()
    text = gen.render()
    assert (ROOT / "docs" / "hooks.md").read_text() == text, "docs/hooks.md is stale: run scripts/gen_hooks_doc.py"
    for name in hook_names():
        fn = getattr(hookspecs, name)
        assert f"### {name}\n\n```python\n{gen.signature_line(name, fn)}\n```" in text
        assert inspect.getdoc(fn) in text
    # the generator writes signatures exactly as hookspecs.py spells them
    assert (
        "def kz_time_candidate(device: str, reference: Callable[[], Any], candidate: Callable[[], Any], "
        "config: EvalConfig, rounds: TimedRounds | None) -> Timing | None\n```\n\nfirstresult: yes" in text
    )
    assert "def kz_result_filed(result: EvalResult) -> None\n```\n\nfirstresult: no" in text
    for banner in ("## registration", "## kernel pipeline", "## prompting", "## trainer lifecycle"):
        assert banner in text
