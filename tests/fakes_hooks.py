"""Fake plugins for tests/test_hooks.py, one per hook under test. They live at module level because evaluator
workers rebuild the plugin set from importable specs ("tests.fakes_hooks:NAME"). Most key on the toy
"python" language of kz_pylang (plain PyTorch candidates, no Triton interpreter) and return None otherwise,
as a dispatch hook's implementation should."""

from __future__ import annotations

import os
import types
from pathlib import Path

import torch
from torch import nn

from kzcore import hookimpl
from kzcore.errors import CompileError
from kzcore.language import Language
from kzcore.types import (
    Command,
    EvalResult,
    OutputCheck,
    ProblemCheckJob,
    ProblemReport,
    PromptSection,
    Status,
    Timing,
)

PY = "python"  # kz_pylang's language


# ----------------------------------------------------------------------------------------------------
# registration
# ----------------------------------------------------------------------------------------------------


class FakeLanguage:
    @hookimpl
    def kz_register_languages(self, register):
        register(Language(name="fakelang", description="a language from tests.fakes_hooks", needs_gpu=True))


FAKE_LANGUAGE = FakeLanguage()


class InlineExecutor:
    """An executor that runs nothing: it answers every job with a canned result. It implements exactly the
    interface the kz_register_executors docstring promises: ``map(jobs)`` (candidate jobs and problem-check
    jobs) and ``close()``."""

    instances: list[InlineExecutor] = []

    def __init__(self, workers=None, config=None, plugins=None):
        self.workers, self.config, self.plugins = workers, config, plugins
        self.jobs: list = []
        self.closed = False
        InlineExecutor.instances.append(self)

    def map(self, jobs):
        for job in jobs:
            self.jobs.append(job)
            if isinstance(job, ProblemCheckJob):  # the problem module alone: a clean report
                p = job.problem
                yield ProblemReport(p.name, p.level, ok_runs=True, deterministic=True, finite=True, degenerate=False)
                continue
            cand = job.candidate
            yield EvalResult(
                problem=cand.problem,
                level=job.problem.level,
                language=cand.language,
                sample=cand.sample,
                status=Status.CORRECT,
                message="answered by the inline executor",
                speedup=3.0,
            )

    def close(self):
        self.closed = True


class FakeExecutors:
    @hookimpl
    def kz_register_executors(self, register):
        register("inline", InlineExecutor)


FAKE_EXECUTORS = FakeExecutors()


class EchoPolicy:
    def __init__(self, spec: str):
        self.spec = spec

    def complete(self, prompts: list[str]) -> list[str]:
        return [f"echo({self.spec}): {p}" for p in prompts]


class FakePolicies:
    @hookimpl
    def kz_register_policies(self, register):
        register("echo", EchoPolicy)


FAKE_POLICIES = FakePolicies()


class FakeSuites:
    """Registers "mysuite" at whatever directory a test puts in ``path`` (registration runs in-process)."""

    path: Path | None = None

    @hookimpl
    def kz_register_suites(self, register):
        if self.path is not None:
            register("mysuite", self.path)


FAKE_SUITES = FakeSuites()


class FakeCommands:
    """Adds ``kz greet NAME [--shout]``; the third-party way to give kz a subcommand."""

    @staticmethod
    def configure(parser):
        parser.add_argument("name", help="who to greet")
        parser.add_argument("--shout", action="store_true", help="in capitals")

    @staticmethod
    def run(args) -> int:
        from kzcore.errors import KzError

        if args.name == "nobody":
            raise KzError("nobody to greet")
        text = f"hello {args.name}"
        print(text.upper() if args.shout else text)
        return 3  # the command's own exit code reaches the shell

    @hookimpl
    def kz_register_commands(self, register):
        register(Command(name="greet", run=self.run, help="say hello", configure=self.configure))


FAKE_COMMANDS = FakeCommands()


class ClashingCommands:
    """Registers a command under a built-in command's name, and the fake's name again (two owners)."""

    name = "greet"

    @hookimpl
    def kz_register_commands(self, register):
        register(Command(name=self.name, run=lambda args: 0))


CLASHING_COMMANDS = ClashingCommands()


class SecondBuiltinSuite:
    @hookimpl
    def kz_register_suites(self, register):
        register("builtin", Path("/nonexistent"))


SECOND_BUILTIN_SUITE = SecondBuiltinSuite()


# ----------------------------------------------------------------------------------------------------
# kernel pipeline
# ----------------------------------------------------------------------------------------------------


class TagExtractor:
    """Understands completions that wrap the module in <code>...</code> tags (the default does not)."""

    @hookimpl
    def kz_extract_source(self, language, completion):
        if language != PY or "<code>" not in completion:
            return None
        return completion.split("<code>", 1)[1].split("</code>", 1)[0].strip() + "\n"


TAG_EXTRACTOR = TagExtractor()


class BanningStaticCheck:
    """Rejects any python candidate that mentions torch.relu (the toy language's own check allows it)."""

    @hookimpl
    def kz_static_check(self, language, source):
        if language != PY:
            return None
        return ["fake check: torch.relu is banned"] if "torch.relu" in source else []


BANNING_STATIC_CHECK = BanningStaticCheck()


class _ReLU(nn.Module):
    def forward(self, x):
        return torch.relu(x)


class ForeignLoader:
    """Loads python candidates without reading the file as Python: "BROKEN" in the file raises CompileError,
    anything else yields a built-in ReLU module (so an unparseable file is still "correct")."""

    @hookimpl
    def kz_load_candidate(self, language, path, device):
        if language != PY:
            return None
        text = Path(path).read_text()
        if "BROKEN" in text:
            raise CompileError("fake compiler: BROKEN is not a valid instruction")
        module = types.ModuleType(Path(path).stem)
        module.ModelNew = _ReLU
        return module


FOREIGN_LOADER = ForeignLoader()


class LaunchCounter:
    """Reports the launch count a candidate module declares in ``KZ_FAKE_LAUNCHES``."""

    @hookimpl
    def kz_instrument_candidate(self, language, module):
        if language != PY:
            return None
        return lambda: module.KZ_FAKE_LAUNCHES


LAUNCH_COUNTER = LaunchCounter()


class Precompiler:
    """Records on the model the input shapes it was precompiled for; a model with ``precompile_fails`` set
    gets a CompileError, as a kernel that does not compile would."""

    @hookimpl
    def kz_precompile(self, language, model, inputs):
        if language != PY:
            return None
        if getattr(model, "precompile_fails", False):
            raise CompileError("fake precompiler: this kernel does not compile")
        model.precompiled_for = [tuple(x.shape) for x in inputs]
        return True


PRECOMPILER = Precompiler()


class AltForward:
    """Runs python candidates through their ``plugin_forward`` method instead of ``__call__``."""

    @hookimpl
    def kz_run_forward(self, language, model, inputs):
        if language != PY:
            return None
        return model.plugin_forward(*inputs)


ALT_FORWARD = AltForward()


class RejectAllOutputs:
    @hookimpl
    def kz_check_outputs(self, expected, actual, config):
        return OutputCheck(False, "fake check rejects every output", max_abs_err=0.25, max_rel_err=0.5)


REJECT_ALL_OUTPUTS = RejectAllOutputs()


class FixedTimer:
    """Runs one pair through the rounds (the last, so checked) and reports fixed figures."""

    @hookimpl
    def kz_time_candidate(self, device, reference, candidate, config, rounds):
        rounds.begin(last=True)
        rounds.took("reference", reference())
        rounds.took("candidate", candidate())
        rounds.end()
        return Timing(
            ref_ms=2.0, cand_ms=0.5, ref_spread=0.01, cand_spread=0.02, reps=7, note=f"fixed timer on {device}",
            phases={"pairs": 0.25, "wait": 0.125},
        )  # fmt: skip


FIXED_TIMER = FixedTimer()


class UncheckedTimer:
    """A timer plugin that ignores the rounds: calls each side once and reports figures, checking nothing."""

    @hookimpl
    def kz_time_candidate(self, device, reference, candidate, config):
        reference()
        candidate()
        return Timing(ref_ms=2.0, cand_ms=0.5, reps=1, note="unchecked timer")


UNCHECKED_TIMER = UncheckedTimer()


class ResultRecorder:
    """Collects what kz_result_filed delivers (it runs in the kz process, so a list is enough)."""

    def __init__(self):
        self.results: list[EvalResult] = []

    @hookimpl
    def kz_result_filed(self, result):
        self.results.append(result)


RESULT_RECORDER = ResultRecorder()


# ----------------------------------------------------------------------------------------------------
# prompting
# ----------------------------------------------------------------------------------------------------


class ExtraSection:
    @hookimpl
    def kz_prompt_sections(self, language, problem, template):
        if language != "fakelang":
            return None
        return [PromptSection("Fake hints", f"hints for {problem.name} ({template})", order=10)]


EXTRA_SECTION = ExtraSection()


class TitlesOnlyFormatter:
    @hookimpl
    def kz_format_prompt(self, language, problem, sections, template):
        return [{"role": "user", "content": " | ".join(s.title for s in sections)}]


TITLES_ONLY_FORMATTER = TitlesOnlyFormatter()


# ----------------------------------------------------------------------------------------------------
# decoding
# ----------------------------------------------------------------------------------------------------


class FastGenerate:
    """Offers a ``generate`` that tags its answer, for models marked ``fast_ok``; records what it was given."""

    def __init__(self):
        self.offered: list[tuple] = []

    @hookimpl
    def kz_fast_generate(self, model, generate):
        self.offered.append((model, generate))
        if not getattr(model, "fast_ok", False):
            return None
        return lambda **kwargs: ("fast", generate(**kwargs))


FAST_GENERATE = FastGenerate()


# ----------------------------------------------------------------------------------------------------
# lifecycle
# ----------------------------------------------------------------------------------------------------


class PhaseRecorder:
    def __init__(self):
        self.events: list[tuple] = []

    @hookimpl
    def kz_phase_start(self, phase):
        self.events.append(("start", phase))

    @hookimpl
    def kz_phase_end(self, phase, metrics):
        self.events.append(("end", phase, dict(metrics)))


PHASE_RECORDER = PhaseRecorder()

MARKER_DIR_ENV = "KZ_TEST_WORKER_MARKER_DIR"


class WorkerMarker:
    """Writes ``<pid>.started`` (holding the device) into $KZ_TEST_WORKER_MARKER_DIR from each worker."""

    @hookimpl
    def kz_worker_started(self, device):
        directory = os.environ.get(MARKER_DIR_ENV)
        if directory:
            (Path(directory) / f"{os.getpid()}.started").write_text(device)


WORKER_MARKER = WorkerMarker()


START_PLAN_ENV = "KZ_TEST_START_PLAN"


class StartPlan:
    """Slows or fails evaluator worker starts, as $KZ_TEST_START_PLAN/plan.json says: ``{"delay_from": N,
    "delay_s": S}`` sleeps S seconds in every start from the N-th on (counting from 0, in start order), and
    ``{"fail": [N, ...]}`` makes those starts raise. Each start claims its number with an exclusive file."""

    @hookimpl
    def kz_worker_started(self, device):
        import json
        import time

        directory = Path(os.environ[START_PLAN_ENV])
        plan = json.loads((directory / "plan.json").read_text())
        n = 0
        while True:
            try:
                (directory / f"start-{n}").open("x").close()
                break
            except FileExistsError:
                n += 1
        if n in plan.get("fail", []):
            raise RuntimeError(f"start {n} fails, as planned")
        if n >= plan.get("delay_from", 1 << 30):
            time.sleep(plan["delay_s"])


START_PLAN = StartPlan()


class PrepareRecorder:
    """Records kz_prepare_candidates calls and how many executors existed at the time."""

    def __init__(self):
        self.calls: list[tuple] = []

    @hookimpl
    def kz_prepare_candidates(self, language, sources, config):
        self.calls.append((language, list(sources), config, len(InlineExecutor.instances)))


PREPARE_RECORDER = PrepareRecorder()
