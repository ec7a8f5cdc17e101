"""A kernel language is an object: a plugin registers a `Language` (``kz_register_languages``) and the core
asks it, through the per-language hooks' defaults (`kzcore.builtins.languages`), how to check, load,
instrument and precompile a candidate, what to put in a prompt, and what its evaluator workers need: their
environment, the compiler caches they may write, the packages the tamper watch covers. The functions below
answer those questions for every registered language at once. A language also writes its solutions to the
trainer's generated op-family problems, and names the packages a run header records and the namespaces the
static checks leave to its kernels. Neighbours: `plugins` (the registry), `executors.lifecycle` (environment,
caches), `evaluate.integrity` (own packages), `evaluate.static` (kernel namespaces), `results` (tracked
packages), `train.variants` (variant solutions).

Nothing heavy is imported here: every plugin imports this module when it loads."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kzcore.errors import KzError

if TYPE_CHECKING:
    from kzcore.train.family import Chain, Elementwise, RowReduction
    from kzcore.types import EvalConfig, LaunchCounter, Problem, PromptSection

CORE_PACKAGE = "kzcore"


def import_module_from_file(path: Path, name: str) -> ModuleType:
    """Import ``path`` as a fresh module called ``name`` (a real file, as Triton's inspect needs)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # not a file Python can import (no .py, .so... suffix)
        raise ImportError(f"cannot import {path}: not a Python module file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


class Language:
    """A kernel language a plugin can compile and run. Subclass it, set the class attributes, override the
    methods your language needs, and register one instance, made once (at module level):

    ``name`` is what candidates, ``--language`` and results call it. ``fence_tags`` are the markdown fence
    labels its code blocks use: extraction prefers a block with one of them (or none) over a block with
    another label. ``needs_gpu`` is True when candidates cannot run on a CPU-only machine (they may still be
    checked and compiled there; ``kz eval`` says so). ``guard_torch_ops`` turns on the runtime guard that flags
    PyTorch compute inside a candidate's forward (off only for languages whose candidates *are* PyTorch, like
    the test suite's toy "python" language). ``own_packages`` are the top-level packages the evaluator's tamper
    watch covers for this language (default: the package that defines the class). ``tracked_packages`` are the
    distributions whose installed versions a results file's run header records (``triton``), beside the
    core's. ``kernel_namespaces`` are the names a candidate's kernel API is reached through (``tl``,
    ``triton``): the static checks do not read a call under one of them as a PyTorch tensor method, even one
    named like one (``tl.sum``).

    The attributes may also be given as keywords (``Language(name="mylang", needs_gpu=True)``), which is all a
    language needs whose plugin implements the kernel-pipeline hooks itself. Methods that run in an evaluator
    worker (``load_candidate``, ``instrument``, ``kernel_names``, ``precompile``, ``worker_started``) may
    write only the worker's scratch directory and the paths ``writable_caches`` names. The object must not
    gain attributes once registered: in a worker, the tamper watch reports a name added to it.
    """

    name: str = ""
    description: str = ""
    fence_tags: tuple[str, ...] = ("python",)
    needs_gpu: bool = False
    guard_torch_ops: bool = True
    tracked_packages: tuple[str, ...] = ()
    kernel_namespaces: tuple[str, ...] = ()

    def __init__(
        self,
        name: str | None = None,
        *,
        description: str | None = None,
        fence_tags: Sequence[str] | None = None,
        needs_gpu: bool | None = None,
        guard_torch_ops: bool | None = None,
        tracked_packages: Sequence[str] | None = None,
        kernel_namespaces: Sequence[str] | None = None,
    ):
        given: dict[str, object] = {
            "name": name,
            "description": description,
            "needs_gpu": needs_gpu,
            "guard_torch_ops": guard_torch_ops,
        }
        sequences = dict(fence_tags=fence_tags, tracked_packages=tracked_packages, kernel_namespaces=kernel_namespaces)
        given.update({key: None if value is None else tuple(value) for key, value in sequences.items()})
        for key, value in given.items():
            if value is not None:
                setattr(self, key, value)
        if not self.name:
            raise ValueError(f"{type(self).__name__} has no name: set the class attribute or pass name=")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    @property
    def own_packages(self) -> tuple[str, ...]:
        return (type(self).__module__.partition(".")[0],)

    # -- in the kz process ------------------------------------------------------------------------------
    def extract_source(self, completion: str) -> str:
        """The candidate's module source in a model completion; "" when there is none (``format_error``).
        Default: the last fenced block that defines ``ModelNew``, preferring blocks tagged with one of
        ``fence_tags`` or untagged (`kzcore.code_blocks`)."""
        from kzcore.builtins.extraction import extract_source

        return extract_source(completion, self.fence_tags)

    def static_check(self, source: str) -> list[str]:
        """Violations of the language's rules (each a short reason; [] when the source passes), found before
        anything runs. Default: none."""
        return []

    def prepare_candidates(self, sources: list[str], config: EvalConfig) -> Any:
        """Work that pays to do ahead, in the kz process, with every candidate source of this language before
        its jobs go to the executor (``kz_cuda``'s cuda-inline builds). Default: nothing."""
        return None

    def prompt_sections(self, problem: Problem, template: str) -> list[PromptSection]:
        """The language's rules and one-shot example for a Coder prompt (the core adds the task and the
        problem's source). Default: none."""
        return []

    def worker_environment(self, device: str) -> dict[str, str]:
        """Variables every evaluator worker gets for ``device`` (``"cuda"`` or ``"cpu"``), set before torch or
        any compiler loads. Computed in the process that starts the workers. Default: none."""
        return {}

    def writable_caches(self) -> list[Path]:
        """Directories the language's compiler writes in an evaluator worker (its caches), besides the worker's
        scratch directory; everything else is read-only there. Computed in the process that starts the
        workers. Default: none."""
        return []

    def variant_solution(self, member: Elementwise | RowReduction | Chain) -> str | None:
        """A solution module in this language for a generated op-family problem (cold-start variants,
        kzcore/train/family.py), or None when the language has none for ``member``. ``member.family`` says
        which kind it is: "elementwise" (``op``, ``summary``, ``inputs``, ``params``, ``fp16``),
        "row_reduction" (``op``, ``keepdim``, ``name``, ``title``) or "elementwise_chain" (``ops``: unary ops
        of ``family.CHAIN_OPS`` applied in order to one float32 tensor, ``name``, ``summary``; asked for only
        with ``[distill] chains``); ``member.init_source`` is the ``__init__``
        method ``ModelNew`` shares with the problem's ``Model``. Distillation keeps only solutions the
        evaluator files correct. Default: None."""
        return None

    # -- in an evaluator worker -------------------------------------------------------------------------
    def worker_started(self, device: str) -> None:
        """Warm up once per worker, after torch and the plugins load and before any job (import the compiler,
        build a tiny kernel). Default: nothing."""

    def load_candidate(self, path: Path, device: str) -> ModuleType:
        """Compile and import the candidate module in ``path`` (it must define ``ModelNew``); raise
        ``CompileError(log)`` when it does not build. Default: import it as a Python module."""
        return import_module_from_file(path, path.stem)

    def instrument(self, module: ModuleType) -> LaunchCounter | Callable[[], int] | None:
        """A `LaunchCounter` (or zero-argument callable) counting launches of the module's own kernels; a
        forward that launches none is ``hack_suspected``. Default: None (no count to give)."""
        return None

    def kernel_names(self, module: ModuleType) -> list[str] | None:
        """Names of the module's own GPU kernels as a profiler traces them (the GPU-work check). Default:
        None (no check)."""
        return None

    def precompile(self, model: Any, inputs: Sequence[Any]) -> bool | None:
        """Compile ``model``'s kernels for ``inputs`` without running them on the GPU (``kz_precompile``).
        Default: None (they compile at their first launch)."""
        return None


# -- every registered language at once ----------------------------------------------------------------


def worker_environment(languages: Iterable[Language], device: str) -> dict[str, str]:
    """The variables all ``languages`` set in a ``device`` worker. Two languages setting one variable to
    different values cannot share a worker: KzError naming both."""
    env: dict[str, str] = {}
    setters: dict[str, str] = {}
    for language in languages:
        for key, value in language.worker_environment(device).items():
            if key in env and env[key] != str(value):
                raise KzError(
                    f"languages {setters[key]!r} and {language.name!r} set {key} differently "
                    f"({env[key]!r}, {str(value)!r}); disable one (KZ_DISABLE_PLUGINS=NAME)"
                )
            env[key], setters[key] = str(value), language.name
    return env


def writable_caches(languages: Iterable[Language]) -> list[Path]:
    """The compiler caches of all ``languages``, each once, in order."""
    return list(dict.fromkeys(Path(path) for language in languages for path in language.writable_caches()))


def own_packages(languages: Iterable[Language]) -> tuple[str, ...]:
    """kzcore and the packages of all ``languages``: what the tamper watch covers."""
    return tuple(dict.fromkeys([CORE_PACKAGE, *(p for language in languages for p in language.own_packages)]))


def tracked_packages(languages: Iterable[Language]) -> tuple[str, ...]:
    """The distributions all ``languages`` track (a run header records their versions), each once, in order."""
    return tuple(dict.fromkeys(p for language in languages for p in language.tracked_packages))


def kernel_namespaces(languages: Iterable[Language]) -> tuple[str, ...]:
    """The kernel namespaces of all ``languages``, each once, in order."""
    return tuple(dict.fromkeys(n for language in languages for n in language.kernel_namespaces))
