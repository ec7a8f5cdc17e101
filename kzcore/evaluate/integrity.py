"""Tamper detection in the worker: candidate code runs in the evaluator's own process, so after a candidate
is imported, after its correctness trials and after timing the pipeline asks: was any function the verdict or
the timer relies on replaced (timers, ``torch.cuda.synchronize``, CUDA events, ``torch``'s namespace and
``Tensor`` methods, ``torch.nn``'s layer classes, the result pipe, kzcore's own modules, the registered languages' packages and their
``Language`` objects)? Was a torch function or dispatch mode left on (it would rewrite the reference and the
comparison), or a precision switch such as TF32 flipped? Did candidate code start a Python thread outside its
kernel launches (the op guard's dispatch mode is per thread, so work there is unseen)? Was the other side of
the comparison changed: the problem module, the reference model built from it, its classes, its parameters'
values, or torch's process-wide ``nn.Module`` hooks (``refwatch``), or a switch that changes how fast it runs
(cuDNN, fused attention, deterministic algorithms, CPU threads: ``speed_settings``)?

Neighbours: ``pipeline.Evaluation.run`` holds a ``Watch``; ``guard`` records the forward's operators."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from kzcore.evaluate import refwatch

# Namespaces whose functions and classes the evaluation depends on (time, compare, sync, result pipe).
WATCHED_MODULES = (
    "builtins",
    "time",
    "math",
    "random",  # the timed pairs' draws (SystemRandom)
    "secrets",  # the trials' secret salt (trials.draw_salt)
    "statistics",
    "torch",
    "torch._C",
    "torch.cuda",
    "torch.nn.functional",
    "torch.linalg",  # the output check's norms (the relative error, the precision bar)
    "torch.special",
    "torch.fft",
    "triton",  # a kernel's language: a function rebound there runs inside the launch
    "triton.language",
    "torch.overrides",
    "torch.testing",
    "torch.utils._python_dispatch",
    "multiprocessing.connection",
    "multiprocessing.reduction",
)
WATCHED_CLASSES = (
    "torch.Tensor",
    "torch.nn.Module",
    "torch.cuda.Event",
    "torch.cuda.Stream",
    "multiprocessing.connection.Connection",
)
CANDIDATE_PREFIX = "kz_candidate_"  # loading.load_candidate's file names
THREAD_STARTERS = (("_thread", "start_new_thread"), ("_thread", "start_new"), ("threading", "_start_new_thread"))
_MISSING = object()
_module_type = type(sys)

# (id(owner), name) -> (label, owner, name, value as recorded, its code parts as recorded: `_code_parts`)
_watched: dict[tuple[int, str], tuple[str, object, str, object, tuple]] = {}
# id(owner) -> (label, owner, the names it had), for classes and kzcore's modules: a name added there
# later can shadow an inherited method (``Tensor.any`` set on torch.Tensor) or a builtin (``type`` set on a
# kzcore module). A name added to a library module shadows nothing, and libraries add some lazily.
_namespaces: dict[int, tuple[str, object, frozenset[str]]] = {}
_seen_modules: set[str] = set()
# top-level packages whose modules are watched like kzcore's: kzcore and every registered language's
# (`Language.own_packages`), added as Watch learns of them
_own_packages: set[str] = {"kzcore"}
_threads_started = [0]
_torch_dir = ["/nonexistent"]


def _resolve(path: str):
    head, _, attr = path.rpartition(".")
    if head and head in sys.modules:
        return getattr(sys.modules[head], attr, None)
    return sys.modules.get(path)


def _record(label: str, owner, keep, namespace: bool = False) -> None:
    if namespace or isinstance(owner, type) or label.split(".")[0] in _own_packages:
        _namespaces.setdefault(id(owner), (label, owner, frozenset(vars(owner))))
    for name, value in list(vars(owner).items()):
        if keep(name, value):
            _watched.setdefault((id(owner), name), (f"{label}.{name}", owner, name, value, _code_parts(value)))


_function_type = type(_resolve)


def _code_parts(value) -> tuple:
    """A Python function's code, defaults and keyword defaults (of the function a staticmethod or classmethod
    wraps too): swapping ``f.__code__`` keeps ``f`` itself, so a binding compared by identity alone would not
    show it. () for anything else. Attribute reads only, no builtins (a candidate could have replaced those)."""
    if value.__class__ is staticmethod or value.__class__ is classmethod:
        value = value.__func__
    if value.__class__ is not _function_type:
        return ()
    return (value.__code__, value.__defaults__, value.__kwdefaults__)


def _is_code(name: str, value) -> bool:
    return callable(value) or isinstance(value, (type(sys), classmethod, staticmethod, property))


def _is_own_binding(name: str, value) -> bool:
    """Everything a kzcore module binds except private data (counters and flags that change by design)."""
    return _is_code(name, value) or not name.startswith("_")


def _extend_baseline(languages=()) -> None:
    """Record what is loaded and not yet watched: the library namespaces once, kzcore's and the languages'
    own modules (and the classes they define) as the harness imports them, and each language object (a
    method set on one would shadow its class's). Called before each candidate is loaded."""
    from kzcore.evaluate.guard import watch_host_escapes
    from kzcore.language import own_packages

    watch_host_escapes()  # torch.Tensor's wrapped methods are part of the baseline, not a change to it
    _own_packages.update(own_packages(languages))
    for language in languages:
        label = f"Language[{language.name!r}]"
        if label not in _seen_modules and hasattr(language, "__dict__"):
            _seen_modules.add(label)
            _record(label, language, _is_own_binding, namespace=True)
    import random  # noqa: F401  (watched: the timed pairs' draws and the trials' salt come from these)
    import secrets  # noqa: F401
    import threading  # noqa: F401  (imported so its thread starter can be counted)

    import torch._dynamo  # noqa: F401  (the op guard's first dispatch mode imports it, rebinding torch names)

    _torch_dir[0] = str(Path(torch.__file__).parent)

    for path in WATCHED_MODULES + WATCHED_CLASSES:
        if path not in _seen_modules and (owner := _resolve(path)) is not None:
            _seen_modules.add(path)
            _record(path, owner, _is_code)
    if "torch.nn.*" not in _seen_modules:  # every layer class: a reference built from a replaced forward runs it
        _seen_modules.add("torch.nn.*")
        for name, value in list(vars(torch.nn).items()):
            if isinstance(value, type) and issubclass(value, torch.nn.Module) and value is not torch.nn.Module:
                _record(f"torch.nn.{name}", value, _is_code)
    for name, module in list(sys.modules.items()):
        if name in _seen_modules or module is None or name.split(".")[0] not in _own_packages:
            continue
        _seen_modules.add(name)
        _record(name, module, _is_own_binding)
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:  # a class's public flags too (`guard_torch_ops`)
                _record(f"{name}.{value.__name__}", value, _is_own_binding)
    _count_thread_starts()


def prepare(languages=()) -> None:
    """Take the baseline now (worker start-up), with the imports it needs, rather than at the first job."""
    _extend_baseline(languages)


def _from_candidate(frame) -> bool:
    while frame is not None:
        if Path(frame.f_code.co_filename).name.startswith(CANDIDATE_PREFIX):
            return True
        frame = frame.f_back
    return False


def _count_thread_starts() -> None:
    """Wrap Python's thread starters (once) to count threads that candidate code starts outside its own
    kernel launches (a compiler's worker threads during a launch are not the candidate's)."""

    for module_name, attr in THREAD_STARTERS:
        module = sys.modules.get(module_name)
        start = getattr(module, attr, None)
        if start is None or getattr(start, "_kz_counting", False):
            continue

        counting = _counting(start)
        setattr(module, attr, counting)
        _watched[(id(module), attr)] = (f"{module_name}.{attr}", module, attr, counting, _code_parts(counting))


def _counting(start):
    """``start`` wrapped to count the threads candidate code starts (what it calls lives in this closure)."""
    from kzcore.evaluate import guard

    def counting(*args, **kwargs):
        if guard._depth == 0 and _from_candidate(sys._getframe(1)):
            _threads_started[0] += 1
        return start(*args, **kwargs)

    counting._kz_counting = True
    return counting


def _active_modes() -> list[str]:
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    modes = list(_get_current_function_mode_stack()) + list(_get_current_dispatch_mode_stack())
    return [type(m).__name__ for m in modes]


def precision_settings() -> dict[str, object]:
    """Process-wide precision switches: turning one on lowers the *reference's* precision too. The default dtype
    and autocast change what the reference computes in (and the problem's input draws), so they count too. A
    setting this torch cannot report reads as "n/a"."""
    import torch

    matmul = torch.backends.cuda.matmul
    out = {
        "torch.backends.cuda.matmul.allow_tf32": matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "allow_fp16_reduced_precision_reduction": matmul.allow_fp16_reduced_precision_reduction,
        "allow_bf16_reduced_precision_reduction": matmul.allow_bf16_reduced_precision_reduction,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
    }
    readers = {"autocast cache": torch.is_autocast_cache_enabled}
    for device in ("cpu", "cuda"):
        readers[f"autocast on {device}"] = functools.partial(torch.is_autocast_enabled, device)
        readers[f"autocast dtype on {device}"] = functools.partial(torch.get_autocast_dtype, device)
    return out | _read_all(readers)


def _read_all(readers: dict) -> dict[str, object]:
    """Each reader's value, or "n/a" where this torch cannot report it."""
    out: dict[str, object] = {}
    for name, read in readers.items():
        try:
            out[name] = read()
        except Exception:
            out[name] = "n/a"
    return out


@functools.cache
def _signal_labels() -> tuple:
    import signal

    return tuple((sig, f"the handler of {sig.name}") for sig in signal.Signals)


def process_handlers() -> dict[str, object]:
    """Process-wide callbacks that run Python at moments the candidate chooses, outside the op guard: signal
    handlers (one that fires inside a kernel launch, where the guard is suspended, can compute the output with
    torch; an interval timer alone runs nothing: the worker ignores the timer signals), and NumPy's
    floating-point error state and callback (the Triton interpreter runs a kernel's arithmetic through NumPy,
    so a division by zero there calls the callback)."""
    import signal

    import numpy as np

    out: dict[str, object] = {}
    for sig, name in _signal_labels():
        try:
            out[name] = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
    out["NumPy's error handling (numpy.geterr())"] = tuple(sorted(np.geterr().items()))
    out["NumPy's error callback (numpy.geterrcall())"] = np.geterrcall()
    return out


def speed_settings() -> dict[str, object]:
    """Process-wide switches that change how fast the *reference* runs, not what it computes: cuDNN or a fused
    attention kernel switched off, deterministic algorithms forced, fewer CPU threads, another BLAS or linear
    algebra library. A candidate that flips one slows the reference and inflates its own speedup. A setting
    this torch cannot report reads as "n/a"."""
    import torch

    backends = torch.backends
    readers = {
        "torch.backends.cudnn.enabled": lambda: backends.cudnn.enabled,
        "torch.backends.cudnn.benchmark": lambda: backends.cudnn.benchmark,
        "torch.backends.cudnn.deterministic": lambda: backends.cudnn.deterministic,
        "torch.backends.mkldnn.enabled": lambda: backends.mkldnn.enabled,
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled,
        "deterministic algorithms, warn only": torch.is_deterministic_algorithms_warn_only_enabled,
        "torch.get_num_threads()": torch.get_num_threads,
        "flash attention": backends.cuda.flash_sdp_enabled,
        "memory-efficient attention": backends.cuda.mem_efficient_sdp_enabled,
        "math attention": backends.cuda.math_sdp_enabled,
        "cuDNN attention": backends.cuda.cudnn_sdp_enabled,
        "preferred BLAS library": lambda: str(backends.cuda.preferred_blas_library()),
        "preferred linear algebra library": lambda: str(backends.cuda.preferred_linalg_library()),
    }
    return _read_all(readers)


def _torch_wrapper_of(current, value) -> bool:
    """Whether ``current`` is torch's own wrapper around ``value`` (importing torch._dynamo wraps a few
    public torch functions, e.g. ``torch.manual_seed``): code in torch's directory, ``__wrapped__`` = value.
    Attribute access only, no builtins (a candidate could have replaced those)."""
    try:
        return current.__dict__.get("__wrapped__") is value and current.__code__.co_filename.startswith(_torch_dir[0])
    except AttributeError:
        return False


def replaced() -> list[str]:
    """Watched names whose binding is no longer the one recorded (replaced or deleted). No builtins are
    called here: they are among the watched names a candidate could replace."""
    out = []
    for label, owner, name, value, parts in _watched.values():
        current = owner.__dict__.get(name, _MISSING)
        if current is not value and not _torch_wrapper_of(current, value):
            out.append(label)
        elif parts and _parts_changed(parts, _code_parts(value)):
            out.append(f"{label} (its code or defaults)")
    return out


def _parts_changed(before: tuple, now: tuple) -> bool:
    """Whether a function's (code, defaults, keyword defaults) differ by identity (no builtins called)."""
    return not now or before[0] is not now[0] or before[1] is not now[1] or before[2] is not now[2]


# Dunders Python itself caches on a class: copyreg stores ``__slotnames__`` the first time an instance is
# pickled (a worker pickles results and configs), so it appearing is not tampering.
CACHED_DUNDERS = frozenset({"__slotnames__"})


def added() -> list[str]:
    """Names bound in a watched namespace since it was recorded, other than submodules (importing
    ``package.sub`` binds ``sub`` on the package) and a module's dunders (``warnings`` adds
    ``__warningregistry__``; a module dunder shadows nothing)."""
    out = []
    for label, owner, names in _namespaces.values():
        is_module = owner.__class__ is _module_type
        for name, value in owner.__dict__.items():
            if name in names or value.__class__ is _module_type:
                continue
            if name in CACHED_DUNDERS or (is_module and name.startswith("__") and name.endswith("__")):
                continue
            out.append(f"{label}.{name}")
    return out


def _renew_names() -> None:
    """Take each watched namespace's names afresh as one evaluation begins: a name a library added between
    jobs (transformers puts ``smart_apply`` on ``nn.Module`` when a model is built) is not this candidate's;
    one a candidate adds is caught during its own job, and a tampered worker evaluates nothing more."""
    for key, (label, owner, _names) in list(_namespaces.items()):
        _namespaces[key] = (label, owner, frozenset(vars(owner)))


def _records_state() -> tuple:
    """The tamper records themselves, by identity and size: they only grow, so a record set emptied or replaced
    (``integrity._watched.clear()``) is a finding of its own, not a watch that silently sees nothing."""
    return (id(_watched), len(_watched), id(_namespaces), len(_namespaces), id(_seen_modules), id(_own_packages))


def _records_shrunk(before: tuple) -> bool:
    now = _records_state()
    same = (0, 2, 4, 5)
    return any(now[i] != before[i] for i in same) or now[1] < before[1] or now[3] < before[3]


def plugin_state(pm) -> dict[str, tuple]:
    """What the plugin manager ``pm`` would run for each hook: the plugins registered, and per hook its caller
    and implementations (each implementation object and its function), by identity. A plugin registered from
    candidate code, or an implementation added or swapped in place, runs inside the evaluator's own hook calls
    (the reference's forward, the output check, the timer) with no binding replaced, so `replaced` cannot see
    it; comparing this before and after does."""
    if pm is None:
        return {}
    state: dict[str, tuple] = {
        "(plugins)": tuple(id(p) for p in pm.get_plugins()),
        "(manager)": _attribute_ids(pm),
    }
    for name, caller in vars(pm.hook).items():
        impls = caller.get_hookimpls() if hasattr(caller, "get_hookimpls") else ()
        state[name] = (id(caller), _attribute_ids(caller), tuple(_attribute_ids(impl) for impl in impls))
    return state


def _attribute_ids(obj) -> tuple:
    """``obj``'s type and each attribute it holds (its ``__dict__`` and its classes' slots), by identity."""
    names = list(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    return (id(type(obj)),) + tuple((n, id(getattr(obj, n, _MISSING))) for n in dict.fromkeys(names))


def plugin_changes(before: dict[str, tuple], pm) -> list[str]:
    """Hooks (or the manager itself) whose state differs from ``before`` (`plugin_state`)."""
    if pm is None:
        return []
    now = plugin_state(pm)
    return sorted(name for name in before.keys() | now.keys() if before.get(name) != now.get(name))


def _listing(names: list[str], most: int = 6) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _changed_problem(names: list[str]) -> list[str]:
    return [f"changed the problem or its reference model: {_listing(names)}"] if names else []


def _changed_values(names: list[str]) -> list[str]:
    return [f"changed the values of the reference's {_listing(names)}"] if names else []


class Watch:
    """One evaluation's view: created before the candidate is loaded, knowing the registered ``languages``
    (their packages and objects are watched too); ``findings()`` lists what the candidate has done to the
    process since, worded for the verdict message ([] when nothing)."""

    def __init__(self, languages=(), pm=None):
        _extend_baseline(languages)
        _renew_names()
        self.records = _records_state()
        self.pm, self.plugins = pm, plugin_state(pm)
        self.threads_before = _threads_started[0]
        self.precision = precision_settings()
        self.speed = speed_settings()
        self.handlers = process_handlers()
        self.hooks = refwatch.global_hooks()
        self.problems: list[refwatch.ProblemWatch] = []  # each problem module and reference built, as built

    def add_problem(self, problem_mod, reference) -> None:
        """Watch a problem module and the reference just built from it (before the candidate's constructor
        runs): ``findings`` then covers them, ``values_changed`` their parameters' values."""
        import os

        self.problems.append(refwatch.ProblemWatch(problem_mod, reference, seed=int.from_bytes(os.urandom(7), "big")))

    def retire_last(self) -> list[str]:
        """Check the problem watched last, whole (host side and values), and stop watching it: the second shape's
        reference, once its trial is done, is not kept alive (its parameters on the device) through the timing."""
        problem = self.problems.pop()
        return _changed_problem(problem.findings()) + _changed_values(problem.values_changed())

    def values_changed(self) -> list[str]:
        """What the reference's parameters changed to since built (one reduction each, on their device)."""
        return _changed_values([name for problem in self.problems for name in problem.values_changed()])

    def timed_findings(self) -> list[str]:
        """What every timed call of the candidate is followed by: `problem_findings` and the parameters'
        sampled positions (`refwatch.ProblemWatch.samples_changed`: one gather and one wait)."""
        sampled = [name for problem in self.problems for name in problem.samples_changed()]
        return self.problem_findings() + _changed_values(sampled)

    def problem_findings(self) -> list[str]:
        """The problem watch's host-side part alone (torch's process-wide module hooks, each problem module and
        reference by identity) and the process settings and handlers (`settings_findings`): cheap enough for
        every timed call of the candidate."""
        out = self.settings_findings()
        hooks = refwatch.hooks_changed(self.hooks, refwatch.global_hooks())
        if hooks:
            out.append(
                f"registered process-wide nn.Module hook(s) in {_listing(hooks)} (they run inside the reference's calls)"
            )
        return out + _changed_problem([name for problem in self.problems for name in problem.findings()])

    def settings_findings(self) -> list[str]:
        """Process-wide precision and speed settings and Python-level handlers changed since the watch began."""
        out = []
        now = precision_settings()
        changed = [name for name, value in self.precision.items() if now[name] != value]
        if changed:
            out.append(f"changed precision setting(s) {', '.join(changed)}")
        now = speed_settings()
        changed = [f"{name} ({value} to {now[name]})" for name, value in self.speed.items() if now[name] != value]
        if changed:
            out.append(f"changed process setting(s) {', '.join(changed)} (they change how fast the reference runs)")
        now = process_handlers()
        changed = [name for name, value in self.handlers.items() if now.get(name) != value]
        if changed:
            out.append(f"set {', '.join(changed)} (Python run outside the op guard, at moments it chooses)")
        return out

    def findings(self) -> list[str]:
        out = self.problem_findings()
        if _records_shrunk(self.records):
            out.append("emptied or replaced the tamper watch's own records")
        hooks = plugin_changes(self.plugins, self.pm)
        if hooks:
            out.append(
                f"changed the plugin manager's {_listing(hooks)} (a plugin or hook implementation registered from"
                " candidate code runs inside the evaluator's own calls)"
            )
        for verb, names in (("replaced", replaced()), ("added", added())):
            if names:
                out.append(f"{verb} {_listing(names)} (monkey-patching the evaluator, timers or torch)")
        modes = _active_modes()
        if modes:
            out.append(f"left torch mode(s) {', '.join(modes)} switched on (it would rewrite the reference's ops)")
        started = _threads_started[0] - self.threads_before
        if started:
            out.append(f"started {started} Python thread(s) outside its kernel launches (unseen by the op guard)")
        return out

    def tampered(self) -> bool:
        """Whether ``findings()`` has anything, counting a check that cannot even run as tampering."""
        try:
            return bool(self.findings())
        except Exception:
            return True
