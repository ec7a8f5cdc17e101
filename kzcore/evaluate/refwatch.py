"""What a candidate must leave alone of the problem it is judged against. The reference runs in the
candidate's process, so without a watch a candidate can win without computing by changing the other side of
the comparison: slow the reference down (a replaced ``Model.forward``, a forward hook on the reference, or
one of torch's process-wide ``nn.Module`` hooks) so an honest kernel looks many times faster; make its inputs
trivial (a replaced ``get_inputs`` drawing zeros, which a zeros kernel then matches); or change its weights.

``ProblemWatch`` records, once the reference is built and before the candidate's constructor runs, the
problem module's bindings, the classes and functions it defines (their attributes, code and defaults), the
reference model's every submodule (its attributes, and the contents of its parameter, buffer, submodule and
hook dicts) by identity, and a fingerprint of the parameters' values. ``findings()`` (host-only, cheap) and
``values_changed()`` (one reduction per parameter on its device) say what differs since. Buffer *values* are
not fingerprinted: a reference in training mode updates its own (BatchNorm's running statistics).
``global_hooks()`` is the process-wide hook registries' contents, which ``integrity.Watch`` compares with its
baseline."""

from __future__ import annotations

import collections
import sys

DICTS = (dict, collections.OrderedDict)  # the dict attributes of a module whose items are watched (hooks, ...)
HOOKS_MODULE = "torch.nn.modules.module"  # its `_global_*` dicts: hooks every nn.Module call runs
FUNCTION_PARTS = ("__code__", "__defaults__", "__kwdefaults__", "__closure__")
CACHED_DUNDERS = frozenset({"__slotnames__"})  # what Python itself caches on a class (integrity.CACHED_DUNDERS)
SAMPLE = 4096  # positions per parameter that `samples_changed` compares after every timed call
CHUNK = 1 << 22  # elements per step of a parameter's fingerprint (a float64 weight vector of this size)


def global_hooks() -> dict[str, tuple]:
    """Each of torch's process-wide ``nn.Module`` hook registries, as its (handle, hook) pairs."""
    module = sys.modules.get(HOOKS_MODULE)
    if module is None:
        return {}
    return {
        name: tuple(value.items())
        for name, value in module.__dict__.items()
        if name.startswith("_global_") and value.__class__ in DICTS
    }


def hooks_changed(before: dict[str, tuple], now: dict[str, tuple]) -> list[str]:
    """The registries (by name) whose hooks differ between two ``global_hooks()`` readings."""
    return [name for name in sorted(set(before) | set(now)) if not _same_items(before.get(name, ()), now.get(name, ()))]


def _same_items(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x[0] == y[0] and x[1] is y[1] for x, y in zip(a, b))


def _snapshot(mapping) -> dict:
    return dict(mapping.items())


def _diff(label: str, before: dict, now) -> list[str]:
    """Names of ``label`` rebound, added or deleted (by identity) since ``before``."""
    out = []
    for name, value in before.items():
        if now.get(name, _MISSING) is not value:
            out.append(f"{label}.{name}")
    out.extend(f"{label}.{name}" for name in now if name not in before and name not in CACHED_DUNDERS)
    return out


_MISSING = object()


class ProblemWatch:
    """One problem module and the reference built from it, as they were when recorded (see the module doc)."""

    def __init__(self, problem_mod, reference, seed: int = 0):
        self.namespaces: list[tuple[str, object, dict]] = []  # (label, owner of __dict__, snapshot)
        self.containers: list[tuple[str, dict, dict]] = []  # (label, a dict attribute, snapshot of its items)
        self.functions: list[tuple[str, object, tuple]] = []  # (label, function, its FUNCTION_PARTS)
        self._namespace("problem", problem_mod)
        for name, value in list(problem_mod.__dict__.items()):
            if isinstance(value, type) and value.__module__ == problem_mod.__name__:
                self._namespace(name, value)
        classes: dict[int, type] = {}
        for path, module in reference.named_modules(prefix="reference", remove_duplicate=False):
            self._namespace(path, module)
            classes.update((id(c), c) for c in type(module).__mro__ if c is not object)
            for name, value in list(module.__dict__.items()):
                if value.__class__ in DICTS:
                    self.containers.append((f"{path}.{name}", value, _snapshot(value)))
        for cls in classes.values():  # torch.nn.Linear.forward and the like: what the reference's calls run
            if cls.__module__ != problem_mod.__name__:
                self._namespace(f"{cls.__module__}.{cls.__qualname__}", cls)
        self.parameters = [(name, p) for name, p in reference.named_parameters(prefix="reference")]
        self.seed = seed
        self.fingerprint = _fingerprint([p for _, p in self.parameters], seed)
        self.samples = _samples([p for _, p in self.parameters], seed)

    def _namespace(self, label: str, owner) -> None:
        self.namespaces.append((label, owner, _snapshot(owner.__dict__)))
        for name, value in list(owner.__dict__.items()):
            function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            if callable(function) and hasattr(function, "__code__"):
                self.functions.append((f"{label}.{name}", function, _parts(function)))

    def findings(self) -> list[str]:
        """Names rebound, added or deleted, and functions whose code or defaults changed (host-only)."""
        out = []
        for label, owner, before in self.namespaces:
            out.extend(_diff(label, before, owner.__dict__))
        for label, container, before in self.containers:
            out.extend(_diff(label, before, container))
        for label, function, parts in self.functions:
            if any(now is not was for now, was in zip(_parts(function), parts)):
                out.append(f"{label} (its code or defaults)")
        return out

    def values_changed(self) -> list[str]:
        """The reference's parameters whose values no longer match their fingerprint."""
        now = _fingerprint([p for _, p in self.parameters], self.seed)
        return [name for (name, _), a, b in zip(self.parameters, self.fingerprint, now) if not _same_value(a, b)]

    def samples_changed(self) -> list[str]:
        """The reference's parameters whose values differ at the positions sampled when recorded (``SAMPLE``
        positions each, drawn from the per-job seed): cheap enough for every timed call. A change that makes
        the reference's work trivial (weights zeroed, a constant) moves nearly every position; the full
        fingerprint (`values_changed`) catches a change to a few."""
        moved = _differ([p for _, p in self.parameters], self.samples)
        return [name for (name, _), changed in zip(self.parameters, moved) if changed]


def _parts(function) -> tuple:
    return tuple(getattr(function, part, None) for part in FUNCTION_PARTS)


def _same_value(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)  # NaN weights fingerprint as NaN both times


def _samples(tensors: list, seed: int) -> list[tuple]:
    """Per tensor, (positions, the values there): ``SAMPLE`` positions drawn from ``seed`` on its device."""
    import torch

    out = []
    for t in tensors:
        flat = t.detach().reshape(-1)
        generator = torch.Generator(device=flat.device)
        generator.manual_seed(seed + 1)
        n = flat.numel()
        where = (
            torch.randint(n, (min(SAMPLE, n),), generator=generator, device=flat.device)
            if n
            else torch.zeros(0, dtype=torch.long, device=flat.device)
        )
        out.append((where, flat[where].clone()))
    return out


def _differ(tensors: list, samples: list[tuple]) -> list[bool]:
    """Per tensor, whether its values at the sampled positions differ from those kept (a NaN equals a NaN)."""
    import torch

    if not tensors:
        return []
    flags = []
    for t, (where, kept) in zip(tensors, samples):
        now = t.detach().reshape(-1)[where]
        same = now == kept
        if now.is_floating_point() or now.is_complex():
            same |= now.isnan() & kept.isnan()
        flags.append(~same.all())
    return torch.stack(flags).tolist()  # one wait for the device, not one per tensor


INPUT_SAMPLE = 1 << 16  # positions per input that a trial compares before and after the candidate's call


class InputWatch:
    """The reference's own copy of a trial's inputs (what it runs on after the candidate), read before the
    candidate's call at ``INPUT_SAMPLE`` positions each (every position of a smaller input) drawn from a seed the
    candidate cannot know. A candidate whose kernel writes memory outside its arguments could rewrite that copy
    and its own inputs alike (the reference then computes something trivial, and the candidate's inputs still
    equal the reference's); ``changed()`` names the inputs that moved. To make the reference's work trivial it
    must change most of an input, which the positions see. What is kept is no copy a scan of memory could find
    and rewrite too: per input, the sum of the sampled values (their bits, as integers) weighted by random
    integers drawn from the seed, which stays on the host and draws the weights again for the comparison."""

    def __init__(self, inputs: list):
        import random

        import torch

        self.indices = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        self.tensors = [inputs[i] for i in self.indices]
        self.seed = random.SystemRandom().getrandbits(31)
        self.sums = self._sums()

    def _sums(self) -> list[int]:
        import torch

        out = []
        for k, t in enumerate(self.tensors):
            flat = t.detach().reshape(-1)
            if flat.is_complex():
                flat = torch.view_as_real(flat).reshape(-1)
            generator = torch.Generator(device=flat.device)
            generator.manual_seed(self.seed + k)
            n = flat.numel()
            if n <= INPUT_SAMPLE:
                values = flat
            else:
                values = flat[torch.randint(n, (INPUT_SAMPLE,), generator=generator, device=flat.device)]
            bits = _as_integers(values)
            weights = torch.randint(1, 1 << 20, (bits.numel(),), generator=generator, device=flat.device)
            out.append((bits * weights).sum())  # int64 wraps alike both times: the same bits give the same sum
        return torch.stack(out).tolist() if out else []  # one wait for the device

    def changed(self) -> list[int]:
        return [i for i, a, b in zip(self.indices, self.sums, self._sums()) if a != b]


def _as_integers(values):
    """``values``' bits as int64 (a float's bit pattern, so a NaN equals the same NaN; a bool as 0/1)."""
    import torch

    if values.dtype == torch.bool:
        return values.to(torch.int64)
    if values.is_floating_point():
        from kzcore.evaluate.tensors import _INT_OF_SIZE

        return values.contiguous().view(getattr(torch, _INT_OF_SIZE[values.element_size()])).to(torch.int64)
    return values.to(torch.int64)


def _fingerprint(tensors: list, seed: int) -> list[float]:
    """Per tensor, the dot product of its values with pseudo-random weights from a generator seeded here
    (in float64, chunk by chunk on the tensor's device; the same values give the same number). A change
    that keeps the sum or the norm still moves it."""
    if not tensors:
        return []
    import torch

    sums = []
    for t in tensors:
        flat = t.detach().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        generator = torch.Generator(device=flat.device)
        generator.manual_seed(seed)
        total = torch.zeros((), dtype=torch.float64, device=flat.device)
        for chunk in flat.split(CHUNK):
            weights = torch.rand(chunk.numel(), generator=generator, dtype=torch.float64, device=flat.device)
            total += torch.dot(chunk.to(torch.float64), weights.add_(0.5))
        sums.append(total)
    return torch.stack(sums).tolist()
