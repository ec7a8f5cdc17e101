"""`kz train --config FILE.toml`: the trainer's configuration, one attrs class per section. Unknown keys
are errors (a typo must not silently fall back to a default). docs/training.md lists every key."""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

import attrs

from kzcore.errors import KzError
from kzcore.train.ca_grpo import CAGRPOConfig
from kzcore.train.coder import GRPOSettings
from kzcore.train.schedule import Schedule
from kzcore.train.sft import SFTSettings
from kzcore.types import EvalConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class ConfigError(KzError):
    pass


KEEP_CHECKPOINTS = ("all", "last-best")


@attrs.frozen
class RunSection:
    dir: str = "runs/train"
    seed: int = 0
    # "last-best": after each phase keep only the checkpoints a later phase can start from (the newest of each
    # role) and the one with the best held-out pass@1; "all": keep every phase's model.
    keep_checkpoints: str = attrs.field(default="last-best", validator=attrs.validators.in_(KEEP_CHECKPOINTS))
    # true: no progress bars from transformers, datasets and TRL and no TRL metric dicts; one line per training
    # step instead (the demo's log). false: the libraries' own output, as they print it
    quiet: bool = False


@attrs.frozen
class ModelsSection:
    coder: str = "smollm2"  # a checkpoint directory, or a policy spec whose policy exposes .checkpoint
    proposer: str = "same"  # "same": one model in two roles; else its own checkpoint / spec


@attrs.frozen
class PluginsSection:
    # names of what installed plugins register; which plugins load is not set here but by the "kzcore" entry
    # points and KZ_LOAD_PLUGINS / KZ_DISABLE_PLUGINS (kzcore.plugins)
    languages: tuple[str, ...] = attrs.field(default=("triton",), converter=tuple)
    executor: str = "local"
    generation: str = "hf"  # policy backend that samples a checkpoint outside GRPO (held-out, Coder pass rates)
    workers: int | None = None


def _specs(value) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,) if value else ()
    return tuple(value)


COLDSTART_TASKS = "coldstart"  # [problems] tasks: the cold start's verified problems


@attrs.frozen
class ProblemsSection:
    coldstart: str = "builtin"  # problems the teacher solves for distillation
    # the initial Coder task pool (the Proposer adds to it): a problem spec, or "coldstart" for the problems the
    # cold start verified a solution to (built-in and variant problems, in the trainer's language)
    tasks: str = "builtin"
    # with tasks = "coldstart": only problems whose shortest verified solution (in the trainer's language) has at
    # most this many characters (0: no limit) -- a curriculum that starts RL where a small model can succeed
    task_max_solution_chars: int = 0
    # evaluated after base, SFT and every Coder phase; never used for training. One spec or a list of specs
    # (e.g. ["builtin:1", "builtin:2"]); "" or [] = none.
    heldout: tuple[str, ...] = attrs.field(default=(), converter=_specs)
    heldout_names: tuple[str, ...] = attrs.field(default=(), converter=tuple)  # keep only these (empty: all)
    exclude_heldout: bool = True


@attrs.frozen
class DistillSection:
    teacher: str = "solutions:builtin"  # "solutions:SUITE" or a policy spec
    k: int = 4
    only_faster: bool = False  # the teacher's prompt is the Coder's: [prompts] coder_template
    variants: int = 0  # at most this many verified variant problems (kzcore/train/variants.py); 0: none
    variant_seed: int = 0  # which variants, when there are more than ``variants`` (and which chains)
    # this many chains of two elementwise ops (kzcore/train/variants.py `chain_variants`), drawn apart from
    # ``variants``; 0: none. What the Proposer composes, fused: a Coder cold start with one op per problem
    # writes one op of a chain and skips the rest
    chains: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    keep_reasoning: bool = True  # train on the teacher's whole answer; False: only its fenced code
    max_new_tokens: int = 4096  # the teacher's sampling budget per answer
    # the evaluator's size profile for verifying distillation candidates ("" = [eval] size): correctness is
    # all distillation needs unless only_faster, so a GPU run can verify at "small" in a fraction of the time
    eval_size: str = ""


@attrs.frozen
class ProposerSection:
    k: int = 4  # Coder samples per valid module for its pass rate
    set_size: tuple[int, int] = attrs.field(default=(1, 4), converter=tuple)
    shape: str = "tent"
    at_edges: float = 0.0
    gate_penalty: float = -1.0
    # SFT steps for the Proposer in the cold start ([sft] settings otherwise): the cold start's problem modules
    # (built-in and verified variants, held-out ones excluded) as answers to the Proposer prompt for their own
    # API sets. 0: none. Needs the Proposer's own model ([models] proposer other than "same").
    cold_start_steps: int = 0
    # a curriculum for the API sets: an API that no Proposer example, [problems] tasks problem or accepted module
    # uses is drawn this much as often (kzcore.proposer.sampler); 1: every API alike (the method's draw)
    unseen_weight: float = attrs.field(default=1.0)
    # more modules for the Proposer's cold start (a problem spec: `kz compose`'s JSONL of verified modules built
    # from the catalog): added to the cold start's problems in cold_start_steps' SFT rows and in the curriculum's
    # known APIs; "compose": the composer's modules made when the run starts, decontaminated against its held-out
    # problems (RUN/composed.jsonl, with its coverage table); "": none
    cold_start_modules: str = ""
    # the examples in the Proposer's prompt (its cold start's and its phases' alike): "suite" (the method's: two
    # modules of the built-in suite, preferring ones that share a requested API) or "per-api" (first, for each
    # requested API, a module of the Proposer's cold start that uses it, on its own where one does and never with
    # exactly the requested set; then the suite's up to two): the Proposer sees each API it is asked for used
    # correctly, where the suite shows about a third of the catalog
    examples: typing.Literal["suite", "per-api"] = "suite"
    # a departure from the method (docs/proposer.md): false pays every gate failure gate_penalty (the method);
    # true pays by how far the module got (kzcore.proposer.gates.FAILURE_STAGES: no parse < no Model/forward/
    # get_inputs < a requested API missing < did not run < ran but nondeterministic, non-finite or degenerate)
    # with GRADED_REWARDS (-1, -0.8, -0.6, -0.4, -0.2); a list of 5 increasing rewards in [-1, 0) sets them
    graded_gate_reward: bool | tuple[float, ...] = attrs.field(default=False)

    @unseen_weight.validator
    def _unseen(self, attribute, value) -> None:
        if not 0.0 < value <= 1.0:
            raise ValueError(f"unseen_weight must lie in (0, 1], got {value!r}")

    @graded_gate_reward.validator
    def _graded(self, attribute, value) -> None:
        from kzcore.proposer.gates import FAILURE_STAGES

        grades = self.gate_grades
        numbers = all(isinstance(g, (int, float)) and not isinstance(g, bool) and -1.0 <= g < 0.0 for g in grades)
        increasing = all(a < b for a, b in zip(grades, grades[1:]))
        if not isinstance(value, bool) and not (len(grades) == len(FAILURE_STAGES) and numbers and increasing):
            raise ValueError(
                f"graded_gate_reward must be true, false or {len(FAILURE_STAGES)} increasing rewards in [-1, 0), "
                f"one per stage a failed module reached ({'; '.join(FAILURE_STAGES)}), got {value!r}"
            )
        if grades and max(grades) >= self.at_edges:
            raise ValueError(
                f"graded_gate_reward: every grade ({', '.join(map(str, grades))}) must be below at_edges "
                f"({self.at_edges}), so that an accepted module pays more than any failed one"
            )

    @property
    def gate_grades(self) -> tuple[float, ...]:
        """The graded gate-failure rewards by stage (kzcore.proposer.gates.failure_stage); () when off."""
        from kzcore.proposer.gates import GRADED_REWARDS

        value = self.graded_gate_reward
        if isinstance(value, bool):
            return GRADED_REWARDS if value else ()
        return tuple(value)


@attrs.frozen
class PromptsSection:
    # The Coder's prompt template, the same in SFT data, RL, pass-rate sampling and held-out evaluation
    # (RunContext.coder_prompt is the one place that builds it).
    coder_template: str = "principles"


def _share(instance, attribute, value) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must lie in [0, 1], got {value!r}")


@attrs.frozen
class TaskMixSection:
    """Where a Coder phase's RL prompts come from. The rest after ``older`` and ``builtin`` is the Proposer's
    newest accepted batch (the method's default: the new batch only)."""

    older: float = attrs.field(default=0.0, validator=_share)  # share from earlier rounds' accepted pool tasks
    builtin: float = attrs.field(default=0.0, validator=_share)  # share from [problems] tasks
    # samples of every [problems] tasks problem drawn from the Coder before its first phase and evaluated: their
    # pass rates (round 0 in RUN/task_rates.jsonl) weight the first round's draw toward the frontier, as later
    # rounds' measured rates do (a task the model always or never solves gives a GRPO group no gradient); 0: none
    calibrate: int = 0
    # the draw's weight of a task measured at pass rate 0 or 1 (no GRPO gradient), against 1 + this at rate 0.5
    # (weight = edge_weight + frontier reward of the rate); smaller leans the draw harder toward the frontier
    edge_weight: float = 0.1

    def __attrs_post_init__(self):
        if not self.edge_weight > 0:
            raise ValueError(
                f"edge_weight must be positive (a task never solved may still be drawn), got {self.edge_weight!r}"
            )
        if self.older + self.builtin > 1.0:
            raise ValueError(f"older + builtin shares exceed 1 ({self.older} + {self.builtin})")


@attrs.frozen
class HeldoutSection:
    n: int = 4
    k: tuple[int, ...] = attrs.field(default=(1, 10), converter=tuple)  # pass@k for each k <= n
    max_new_tokens: int = 1024
    temperature: float = 0.7
    base: bool = True  # score the base model too, before SFT (false: a run that repeats a measured base skips it)
    # score this many training problems too, in the first language, at every held-out evaluation: drawn once from
    # [problems] tasks with a fixed seed, the same in every run of a config (a training-side curve that does not
    # depend on which tasks each round drew); 0: none
    probe: int = 0
    # held-out problems against the training problems by kzcore.decontam's rule (docs/decontamination.md):
    # "off"; "report": the clean / contaminated split goes into RUN/decontamination.json and the plan, and every
    # held-out evaluation also scores the clean subset (heldout_clean_pass@k); "drop-train": the same, and the
    # training problems that near-duplicate a held-out problem are left out of training
    decontaminate: typing.Literal["off", "report", "drop-train"] = "off"
    # which phases score the held-out problems: "every" (the base model, SFT and every Coder phase), "ends" (the
    # base model, SFT and the schedule's last Coder phase: a large held-out suite is read once per configuration,
    # and the phases between get the validation and probe curves only) or "last" (as "ends" without the SFT model:
    # a run that repeats a cold start another run of the same config and seed has already scored)
    phases: typing.Literal["every", "ends", "last"] = "every"
    # this many of the cold start's problems, drawn once with a fixed seed (the same in every run of a config),
    # are kept out of distillation (their variants too), SFT and the Coder's tasks, and scored at every held-out
    # evaluation in the first language (validation_* metrics): the split to choose settings on, so that the
    # held-out suite is not tuned on; 0: none
    validation: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    def __attrs_post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be at least 1 sample per problem, got {self.n!r}")
        if not self.k or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.k):
            raise ValueError(f"k must list integers of at least 1 (pass@k), got {list(self.k)!r}")
        if min(self.k) > self.n:
            raise ValueError(f"every k ({list(self.k)}) is above n = {self.n}: no pass@k could be computed")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens!r}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be 0 (greedy) or more, got {self.temperature!r}")

    def ks(self) -> list[int]:
        """The k of pass@k that n samples per problem can estimate (a k above n is listed but not computed)."""
        return [k for k in self.k if k <= self.n]


CoderMethod = typing.Literal["ca-grpo", "sft", "rft"]
CODER_METHODS: tuple[str, ...] = typing.get_args(CoderMethod)


def _check_method(instance, attribute, value) -> None:
    if value not in CODER_METHODS:
        raise ValueError(f"method must be one of {', '.join(repr(m) for m in CODER_METHODS)}, got {value!r}")


@attrs.frozen
class CoderSection(GRPOSettings):
    """``[coder]``: the Coder phase's GRPO settings and ``method``, what trains the Coder in it: ``"ca-grpo"``
    (the method) or one of the two controls at the same compute without RL (kzcore.train.controls): ``"sft"``
    (SFT continued on the cold start's distilled set) or ``"rft"`` (SFT on the Coder's own verified samples of
    the phase's tasks), for ``max_steps`` optimizer steps of ``batch_size`` sequences either way."""

    method: CoderMethod = attrs.field(default="ca-grpo", validator=_check_method)

    @classmethod
    def of(cls, settings: GRPOSettings) -> CoderSection:
        """``settings`` as a Coder section; plain GRPO settings (a config built in Python) train by CA-GRPO."""
        return settings if isinstance(settings, cls) else cls(**attrs.asdict(settings, recurse=False))

    def grpo(self) -> GRPOSettings:
        """The GRPO settings alone: what a CA-GRPO phase trains with and records in its checkpoints' identity."""
        return GRPOSettings(**{f.name: getattr(self, f.name) for f in attrs.fields(GRPOSettings)})


@attrs.frozen
class TrainConfig:
    run: RunSection = RunSection()
    models: ModelsSection = ModelsSection()
    plugins: PluginsSection = PluginsSection()
    problems: ProblemsSection = ProblemsSection()
    schedule: Schedule = Schedule()
    distill: DistillSection = DistillSection()
    prompts: PromptsSection = PromptsSection()
    task_mix: TaskMixSection = TaskMixSection()
    sft: SFTSettings = SFTSettings()
    coder: CoderSection = attrs.field(default=CoderSection(), converter=CoderSection.of)
    ca_grpo: CAGRPOConfig = CAGRPOConfig()
    proposer: ProposerSection = ProposerSection()
    proposer_grpo: GRPOSettings = GRPOSettings(num_generations=4, batch_size=4, max_completion_length=768)
    eval: EvalConfig = EvalConfig()
    heldout: HeldoutSection = HeldoutSection()

    def __attrs_post_init__(self) -> None:  # what spans sections: checked when the config is read, before a dry run
        if self.proposer.cold_start_steps and self.models.proposer == "same":
            raise ConfigError(
                "[proposer] cold_start_steps trains the Proposer's own model: set [models] proposer (e.g. to the "
                'coder\'s spec) instead of "same", or cold_start_steps = 0'
            )


def _build(cls, data: dict, where: str):
    fields = {f.name: f for f in attrs.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"[{where}]: unknown key(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    hints = _type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        field = fields[name]
        key = f"{where}.{name}" if where else name
        if attrs.has(type(field.default)):
            if not isinstance(value, dict):
                raise ConfigError(f"[{key}] must be a table of keys, got {value!r}")
            kwargs[name] = _build(type(field.default), value, key)
            continue
        value = tuple(value) if isinstance(value, list) else value
        _check_type(field, hints.get(name, _default_type(field)), value, where)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[{where or 'config'}]: {exc}") from None


# ----------------------------------------------------------------------------------------------------
# Up-front validation: types from each section class's annotations (or its default's type when a field has
# none), so a key added to any section is checked without touching this code; and the device.
# ----------------------------------------------------------------------------------------------------

_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _type_hints(cls) -> dict:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that cannot be resolved: fall back to the defaults' types
        return {}


def _default_type(field):
    default = field.default
    return type(default) if isinstance(default, (bool, int, float, str)) else None


def _matches(value, hint) -> bool:
    """Whether a TOML value fits an annotation; annotations this does not understand accept anything."""
    if hint is None or hint is typing.Any:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        return not args or (len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args)))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    return True


def _describe(hint) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        return f"a list of {_describe(args[0])}" if args else "a list"
    return _TYPE_NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def _check_type(field, hint, value, where: str) -> None:
    if _matches(value, hint):
        return
    if field.converter is not None:  # a converter may accept other spellings (e.g. one spec for a list)
        try:
            if _matches(field.converter(value), hint):
                return
        except (TypeError, ValueError):
            pass
    raise ConfigError(f"[{where or 'config'}] {field.name} must be {_describe(hint)}, got {value!r}")


# the phase role that trains with each section's settings (the sections check_device looks at)
SECTION_ROLES = {"sft": "sft", "coder": "coder", "proposer_grpo": "proposer"}


def check_device(config: TrainConfig, cuda_available: bool | None = None, roles=None) -> None:
    """Refuse, before any phase runs, a section that would train on a GPU (``use_cpu = false``) on a machine
    without CUDA. Every section with a ``use_cpu`` key is checked, whether or not the schedule uses it, unless
    ``roles`` names the phase roles that will run (``kz train --until``): then only their sections."""
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    if cuda_available:
        return
    for field in attrs.fields(type(config)):
        if roles is not None and SECTION_ROLES.get(field.name, field.name) not in roles:
            continue
        section = getattr(config, field.name)
        if getattr(section, "use_cpu", True) is False:
            raise ConfigError(
                f"[{field.name}] use_cpu = false, but this machine has no CUDA GPU: "
                f"set use_cpu = true in [{field.name}] or run on a GPU"
            )


def _read_toml(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """The TOML at ``path``; a top-level ``extends = "OTHER.toml"`` (relative to this file) is read first and
    this file's tables are merged over it key by key (an ablation config states only what it changes)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: extends must be a path string, got {parent!r}")
    base_path = (path.parent / parent).resolve()
    if base_path in seen:
        raise ConfigError(f"{path}: extends {parent!r} goes round in a circle")
    base = _read_toml(base_path, (*seen, path.resolve()))
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def load_config(path: Path) -> TrainConfig:
    data = _read_toml(Path(path))
    try:
        return _build(TrainConfig, data, "")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
