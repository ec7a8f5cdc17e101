"""Every hook kzcore calls. The docstrings here are the hook reference (docs/hooks.md mirrors the
signatures, and a test keeps the two in step). Hooks are always called with keyword arguments.

Two shapes only: collector hooks ``kz_register_*`` / ``kz_prompt_sections`` / lifecycle notifications,
which every plugin may implement; and dispatch hooks (``firstresult=True``), keyed by an argument, where a
plugin returns None for inputs that are not its own and the core's ``trylast`` default answers last.

A language plugin implements none of the kernel-pipeline hooks: it registers a ``Language`` object and the
core's default of each hook keyed by ``language`` asks that object (``Language.static_check``,
``Language.load_candidate``, ...; kzcore/builtins/languages.py). The hooks stay for plugins that override or
wrap a step for some or all languages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from kzcore import PROJECT
from kzcore.language import Language
from kzcore.timed import TimedRounds
from kzcore.types import (
    Command,
    EvalConfig,
    EvalResult,
    LaunchCounter,
    OutputCheck,
    Phase,
    Problem,
    PromptSection,
    Timing,
)

hookspec = pluggy.HookspecMarker(PROJECT)

# ---------------------------------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------------------------------


@hookspec
def kz_register_languages(register: Callable[[Language], None]) -> None:
    """Register kernel languages this plugin can compile and run.

    :param register: call ``register(language)`` once per language, with a ``kzcore.Language`` (an instance
        of a subclass whose methods check, load, instrument and precompile candidates, give prompt sections,
        and name the worker environment, writable caches and packages the language needs; made once).

    Implemented by language plugins (``kz_triton``, ``kz_cuda``). The evaluator refuses a candidate whose
    language nobody registered, naming the installed ones. Evaluator workers get every registered language's
    environment and writable caches, and their tamper watch covers every language's packages.
    """


@hookspec
def kz_register_executors(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register executors: places where candidates run.

    :param register: call ``register(name, factory)``; ``factory(workers=int|None, config=EvalConfig,
        plugins=list[str])`` returns a ``kzcore.executors.Executor``: ``start()`` (called once, before a
        results file's run header is written), ``map(jobs)``, ``close()``. ``map`` takes two kinds of job and
        yields one answer per job, in any order: an ``EvalResult`` for an ``EvalJob`` (a candidate) and a
        ``ProblemReport`` for a ``ProblemCheckJob`` (the problem module alone: ``kz eval``'s problem check,
        the Proposer's gates, ``kz suite check``). A job it cannot finish is answered with
        ``job.failure(status, message)``; ``job.ident`` matches its answer's ``ident``; inside a worker,
        ``kzcore.executors.worker.run_job(job, ...)`` runs either kind (as the local pool's workers do).
        ``kzcore.executors.open_executor`` builds and starts one; the trainer holds one for its whole run.

    The core registers ``local`` (a pool of spawned worker processes); cluster executors come as plugins.
    """


@hookspec
def kz_register_policies(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register policy backends (models that produce completions).

    :param register: call ``register(name, factory)``; ``factory(spec: str)`` returns a policy object.

    Implemented by model plugins (``kz_models``: hf, vllm, openai, replay).
    """


@hookspec
def kz_register_suites(register: Callable[[str, Path], None]) -> None:
    """Register named problem suites.

    :param register: call ``register(name, path)`` where ``path`` is a KernelBench-style directory
        (``level1/``, ``level2/``, optional ``solutions/<language>/levelN/``).

    The kz_suites plugin registers ``builtin`` (the core ships no problems) and ``kernelbench`` (its copy of
    KernelBench's levels 1 and 2, which ``--problems kernelbench[:levels]`` reads when no checkout is given);
    ``--problems NAME[:level]`` selects a registered suite.
    """


@hookspec
def kz_register_commands(register: Callable[[Command], None]) -> None:
    """Register ``kz`` subcommands (as ``llm``'s plugins add ``llm`` commands).

    :param register: call ``register(Command(name=..., run=..., help=..., configure=...))`` once per command:
        ``configure(parser)`` adds the command's arguments to its ``argparse`` parser, ``run(args)`` runs
        it and returns the exit code. A ``KzError`` raised by ``run`` ends the command with one line, as
        for the built-in commands.

    kz's own commands are registered through this hook too (the default plugin ``kzcore.builtins.commands``),
    so a plugin's command is parsed, helped and dispatched exactly as they are. A name that is a built-in
    command, or that two plugins register, is an error naming the plugins.
    """


# ---------------------------------------------------------------------------------------------------
# kernel pipeline (run inside evaluator workers, except extraction and static checks)
# ---------------------------------------------------------------------------------------------------


@hookspec
def kz_prepare_candidates(language: str, sources: list[str], config: EvalConfig) -> Any:
    """Called in the ``kz`` process with every candidate source of one language, before its jobs go to
    the executor.

    :param language: the kernel language of these candidates.
    :param sources: their extracted module sources (completions without a code block are left out).
    :param config: the evaluation settings (``config.device`` says where they will run).
    :return: ignored.

    For work that pays to do ahead and off the evaluation workers: ``kz_cuda`` builds cuda-inline
    extensions here on CPU processes, in parallel, into a disk cache, so no GPU worker waits for nvcc.
    Implementations return at once for languages that are not theirs. The core's default calls the
    language's ``Language.prepare_candidates``.
    """


@hookspec
def kz_worker_started(device: str) -> None:
    """Called once in each evaluator worker after torch and the plugins are loaded, before any job.

    :param device: ``"cuda"`` or ``"cpu"``.

    The core's default calls ``Language.worker_started`` of every registered language, where language
    plugins warm up (import the compiler, build a tiny kernel) so the first candidate's evaluation does not
    pay for it.
    """


@hookspec(firstresult=True)
def kz_extract_source(language: str, completion: str) -> str | None:
    """Extract the candidate's source code from a model completion.

    :param language: the candidate's kernel language.
    :param completion: raw model output (may hold reasoning text and several code blocks).
    :return: the source, or None to defer; "" means no usable code (``format_error``). The core's default
        asks ``Language.extract_source``, whose default picks the last fenced block that defines ``ModelNew``,
        preferring the language's ``fence_tags`` (or the unfenced text when it does).

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def kz_static_check(language: str, source: str) -> list[str] | None:
    """Check a candidate's source before anything runs.

    :param language: the candidate's kernel language.
    :param source: the extracted module source.
    :return: a list of violations (each a short reason; empty when the source passes), or None when
        ``language`` is not this plugin's. The core's default asks ``Language.static_check``.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def kz_load_candidate(language: str, path: Path, device: str) -> ModuleType | None:
    """Compile/import a candidate module from a real file.

    :param language: the candidate's kernel language.
    :param path: a file in the worker's scratch directory holding the source.
    :param device: ``"cuda"`` or ``"cpu"``.
    :return: the imported module (it must define ``ModelNew``), or None when ``language`` is not this
        plugin's. Raise ``kzcore.errors.CompileError(log)`` when the candidate does not build. The core's
        default asks ``Language.load_candidate``.

    Stops at first non-None result. Runs in a worker process, never in ``kz`` itself.
    """


@hookspec(firstresult=True)
def kz_instrument_candidate(language: str, module: ModuleType) -> LaunchCounter | Callable[[], int] | None:
    """Make the candidate's own kernel launches countable.

    :param language: the candidate's kernel language.
    :param module: the loaded candidate module.
    :return: a `LaunchCounter` (or a plain zero-argument callable) giving how many of the module's kernels
        have launched so far, or None when ``language`` is not this plugin's. A forward that launches none and
        returns a tensor is ``hack_suspected`` (one that returns no tensor is ``incorrect``). The evaluator keeps the instrumentation on while it times the candidate, so timed calls
        take the launch path its trials took; a LaunchCounter's ``bare()`` takes it off for tools that time a
        candidate outside the evaluator. The core's default asks ``Language.instrument``.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def kz_kernel_names(language: str, module: ModuleType) -> list[str] | None:
    """Name the candidate's own GPU kernels as they appear in a profiler trace.

    :param language: the candidate's kernel language.
    :param module: the loaded candidate module.
    :return: names (a kernel whose traced name contains one counts as the candidate's), or None when
        ``language`` is not this plugin's. With names, a GPU evaluation profiles one forward and calls it
        ``hack_suspected`` when most of its GPU time ran in other kernels (ATen, cuBLAS, CuPy, ...). The
        core's default asks ``Language.kernel_names``.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def kz_precompile(language: str, model: Any, inputs: Sequence[Any]) -> bool | None:
    """Compile the candidate's kernels for these inputs without running them on the GPU.

    Called once per candidate after construction and before the correctness trials, outside the lock that
    workers sharing a GPU hold while they use it, so just-in-time compilation never keeps another worker's
    timing waiting. Launches made here must not be counted, and the forward's outputs are discarded.
    The second-shape trial (``EvalConfig.second_shape``) constructs another model and calls it again.

    :param language: the candidate's kernel language.
    :param model: the constructed ``ModelNew``.
    :param inputs: inputs of the first trial's shapes and dtypes (their values may be anything).
    :return: True when the kernels were compiled, False when they could not be (they then compile at their
        first launch, as usual), None when ``language`` is not this plugin's. The core's default asks
        ``Language.precompile``.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def kz_run_forward(language: str, model: Any, inputs: Sequence[Any]) -> Any:
    """Run one forward pass of a candidate (or reference) model.

    :param language: the candidate's language, or ``"reference"`` for the problem's ``Model``.
    :param model: the constructed ``nn.Module``.
    :param inputs: positional inputs.
    :return: the forward's output. The core's default calls ``model(*inputs)``; a plugin may override to
        run under a graph, a stream or a profiler.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def kz_check_outputs(expected: Sequence[Any], actual: Sequence[Any], config: EvalConfig) -> OutputCheck | None:
    """Compare one trial's candidate outputs with the reference's.

    :param expected: the reference outputs (tensors), flattened to a list.
    :param actual: the candidate outputs, flattened the same way.
    :param config: tolerances (``config.tolerance_for(dtype)``).
    :return: an ``OutputCheck``. The core's default requires equal count, shape, dtype and device, no NaN
        or Inf where the reference has none, and ``|a - e| <= atol + rtol * |e|`` elementwise. A check that
        computed ``||a - e||`` and ``||e||`` on the way may put them in ``OutputCheck.norms``; the core's
        relative-error check, which runs after whichever plugin answered, then takes them. kz_triton answers
        on GPU workers with the default's rules and a one-pass kernel (``kzcore.builtins.outputs.compare``
        with ``summarise``).

    An implementation that fails every output the default's elementwise rule fails (that rule, or a stricter
    one) sets ``elementwise = True`` on its function (the default and kz_triton's do): every timed pair's
    outputs are then compared at drawn positions by that rule (``kzcore/evaluate/spots.py``). Where any
    registered implementation lacks it, only the drawn timed pairs and the last are checked, with a note in
    the result.

    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def kz_time_candidate(
    device: str,
    reference: Callable[[], Any],
    candidate: Callable[[], Any],
    config: EvalConfig,
    rounds: TimedRounds | None,
) -> Timing | None:
    """Time reference and candidate side by side in this worker.

    The timing stage calls this once per timing. The pairs go round the placements of the inputs
    (``EvalConfig.timing_placements``: the same values in other device memory, since a kernel's speed can depend
    on where its inputs lie): ``rounds.begin()`` moves the inputs that ``reference`` and ``candidate`` read to the
    next placement. A timer that hands each call's sample to ``rounds.took`` lets the core keep the mean of the
    per-placement medians; one that does not keeps its own medians over all placements.

    :param device: ``"cuda"`` or ``"cpu"``.
    :param reference: runs one reference forward on the prepared inputs and returns its outputs.
    :param candidate: runs one candidate forward on the prepared inputs and returns its outputs (with its
        launch instrumentation on, as in its correctness trials).
    :param config: warm-up, repetitions, L2 flush, launch cover, time budget.
    :param rounds: what every timed pair goes through (`kzcore.timed.TimedRounds`), or None when the caller
        times fixed inputs unchecked (benches): ``rounds.begin()`` before a pair (new input contents),
        ``rounds.took(side, outputs, ms)`` after each call once the device is synchronized, ``rounds.end()`` after
        the pair (checks the outputs when the pair was drawn for it; raises ``TimedCheckFailed``, which must
        propagate), and ``rounds.begin(last=True)`` for the last pair. The evaluator refuses a timing whose
        last pair went unchecked.
    :return: a ``Timing``. The core's default on CUDA interleaves the two; before each call it flushes L2
        and queues a GPU-side wait (``launch_cover_us`` at first), then records the start event, makes the
        call and records the end event on the calling stream at once, and only then synchronizes; a sample
        the host took longer to queue than the flush and the wait lasted is taken again behind a longer wait,
        so the events hold the kernels' GPU time and none of the host's; a candidate whose calls leave work
        running past their end event (on a stream the calling one does not wait for) raises
        ``TimedCheckFailed``. On CPU it runs two checked pairs untimed and returns a Timing with no figures
        and a note saying why. ``Timing.phases`` (seconds by name, optional) lands in the result's stages as
        ``timing.NAME``: where the timing's time went.

    Stops at first non-None result.
    """


@hookspec
def kz_result_filed(result: EvalResult) -> None:
    """Called in the ``kz`` process for every result as it is written to the results file.

    :param result: the verdict just filed.

    For loggers, trackers and live dashboards. Return values are ignored.
    """


# ---------------------------------------------------------------------------------------------------
# prompting
# ---------------------------------------------------------------------------------------------------


@hookspec
def kz_prompt_sections(language: str, problem: Problem, template: str) -> list[PromptSection] | None:
    """Contribute sections to a Coder prompt.

    :param language: the target kernel language.
    :param problem: the problem to solve.
    :param template: the prompt template's name (``"kernelbench"``, ``"principles"``, ...).
    :return: sections to add (or None). The core adds the task statement and the problem's source, and the
        language's ``Language.prompt_sections`` (its rules and a one-shot example).
    """


@hookspec(firstresult=True)
def kz_format_prompt(
    language: str, problem: Problem, sections: list[PromptSection], template: str
) -> list[dict[str, str]] | None:
    """Turn prompt sections into chat messages.

    :param language: the target kernel language.
    :param problem: the problem to solve.
    :param sections: every section collected through ``kz_prompt_sections``, sorted by ``order``.
    :param template: the prompt template's name.
    :return: ``[{"role": ..., "content": ...}, ...]``. The core's default makes one system and one user
        message.

    Stops at first non-None result.
    """


# ---------------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def kz_fast_generate(model: Any, generate: Callable[..., Any]) -> Callable[..., Any] | None:
    """Offer a faster ``generate`` for a transformers model that the trainer is about to train with GRPO.

    :param model: the model TRL generates with (the module being trained: its weights change between calls).
    :param generate: the ``generate`` it would call otherwise (transformers', wrapped by the core).
    :return: a callable taking what TRL passes to ``model.generate`` (``input_ids``, ``attention_mask``,
        ``generation_config``, keywords) and returning prompt + completion token ids as ``generate`` does; it
        should hand any call it does not implement to ``generate``. None: keep ``generate``.

    kz_models answers for Llama-family models on a CUDA GPU (a static KV cache, each decoding step replayed as
    a CUDA graph; kz_models.graphdecode). Stops at first non-None result.
    """


# ---------------------------------------------------------------------------------------------------
# trainer lifecycle
# ---------------------------------------------------------------------------------------------------


@hookspec
def kz_phase_start(phase: Phase) -> None:
    """Called when a trainer phase (distill, sft, proposer or coder steps of one round) begins.

    :param phase: the phase about to run.
    """


@hookspec
def kz_phase_end(phase: Phase, metrics: dict[str, float]) -> None:
    """Called when a trainer phase ends.

    :param phase: the phase that ran.
    :param metrics: the phase's summary numbers (reward mean, pass rate, seconds, ...).
    """
