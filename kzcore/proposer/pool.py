"""The task pool: one JSON line per proposed module (accepted or not) with its requested APIs, gate verdicts,
the Coder's pass rate per round and provenance. The Proposer appends to it; the Coder phase reads the
accepted tasks and records pass rates; the sampler weights API sets by its history; ``kz pool stats``
summarizes it. Also loadable as a Hugging Face ``datasets.Dataset``."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from kzcore.errors import KzError
from kzcore.jsonl import append_jsonl, read_jsonl_numbered, write_text_atomic
from kzcore.proposer.gates import GATE_ORDER, GateResult
from kzcore.types import Problem

POOL_SCHEMA = 1


class PoolError(KzError):
    """A pool file is unreadable or malformed, or an update names a task it does not hold."""


@attrs.frozen
class PassRate:
    """The Coder solved ``passed`` of ``k`` samples of the task in trainer round ``round``."""

    round: int
    k: int = attrs.field(validator=attrs.validators.ge(1))
    passed: int = attrs.field(validator=attrs.validators.ge(0))

    def __attrs_post_init__(self):
        if self.passed > self.k:
            raise PoolError(f"pass rate: {self.passed} passed of only {self.k} samples")

    @property
    def p(self) -> float:
        return self.passed / self.k


@attrs.frozen
class TaskRecord:
    """One proposed module. ``apis``: the API set the Proposer was asked to use; ``apis_used``: the catalog
    APIs found in its code. ``gates``: verdicts in GATE_ORDER up to the first failure. ``provenance``: policy,
    round, time (UTC ISO 8601), prompt_hash, seed, sample."""

    id: str
    apis: tuple[str, ...] = attrs.field(converter=tuple)
    level: int
    code: str
    gates: dict[str, GateResult] = attrs.field(factory=dict, hash=False)
    pass_rates: tuple[PassRate, ...] = attrs.field(default=(), converter=tuple)
    provenance: dict = attrs.field(factory=dict, hash=False)
    apis_used: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    dedup_key: str = ""

    @property
    def name(self) -> str:
        return f"proposed_{self.id}"

    @property
    def failed_gate(self) -> str | None:
        """The first gate that failed, or None."""
        return next((name for name in GATE_ORDER if name in self.gates and not self.gates[name].ok), None)

    @property
    def accepted(self) -> bool:
        """Every gate ran and passed: a task the Coder may be given."""
        return all(name in self.gates and self.gates[name].ok for name in GATE_ORDER)

    @property
    def latest_pass_rate(self) -> float | None:
        if not self.pass_rates:
            return None
        return max(self.pass_rates, key=lambda r: r.round).p

    def to_problem(self) -> Problem:
        return Problem(name=self.name, source=self.code, level=self.level, suite="proposer")

    def to_json(self) -> dict:
        return {
            "schema": POOL_SCHEMA,
            "id": self.id,
            "name": self.name,
            "apis": list(self.apis),
            "apis_used": list(self.apis_used),
            "level": self.level,
            "code": self.code,
            "gates": {name: result.to_json() for name, result in self.gates.items()},
            "accepted": self.accepted,
            "pass_rates": [{"round": r.round, "k": r.k, "passed": r.passed, "p": r.p} for r in self.pass_rates],
            "provenance": dict(self.provenance),
            "dedup_key": self.dedup_key,
        }

    @classmethod
    def from_json(cls, row: dict) -> TaskRecord:
        if row.get("schema", POOL_SCHEMA) != POOL_SCHEMA:
            raise PoolError(f"task pool schema {row.get('schema')!r}; this kzcore reads schema {POOL_SCHEMA}")
        return cls(
            id=str(row["id"]),
            apis=tuple(row["apis"]),
            level=int(row["level"]),
            code=str(row["code"]),
            gates={name: GateResult.from_json(g) for name, g in (row.get("gates") or {}).items()},
            pass_rates=tuple(
                PassRate(int(r["round"]), int(r["k"]), int(r["passed"])) for r in row.get("pass_rates") or ()
            ),
            provenance=dict(row.get("provenance") or {}),
            apis_used=tuple(row.get("apis_used") or ()),
            dedup_key=str(row.get("dedup_key", "")),
        )


def append_records(path: str | Path, records: Iterable[TaskRecord]) -> None:
    """Append one line per record (a torn last line left by an interrupted append is cut off first)."""
    append_jsonl(path, [record.to_json() for record in records])


def read_pool(path: str | Path) -> list[TaskRecord]:
    """Every record in the pool file. A torn last line (an interrupted append) is skipped with a warning;
    any other line that is not a task record is a PoolError naming it, so that nothing is dropped from a
    pool that `record_pass_rates` then rewrites."""
    path = Path(path)

    def reject(where: str, why: str) -> PoolError:
        return PoolError(f"{where}: not a task record ({why})")

    try:
        rows = read_jsonl_numbered(path, reject)
    except OSError as exc:
        raise PoolError(f"task pool {path}: cannot read ({exc.strerror})") from None
    records = []
    for lineno, row in rows:
        try:
            records.append(TaskRecord.from_json(row))
        except PoolError as exc:
            raise PoolError(f"{path}:{lineno}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise PoolError(f"{path}:{lineno}: not a task record ({type(exc).__name__}: {exc})") from None
    return records


def write_pool(path: str | Path, records: Iterable[TaskRecord]) -> None:
    """Replace the pool file atomically (a reader never sees half a file)."""
    write_text_atomic(path, "".join(json.dumps(r.to_json()) + "\n" for r in records))


def record_pass_rates(path: str | Path, round: int, results: Mapping[str, tuple[int, int]]) -> int:
    """Add the Coder's round-``round`` result ``{task id: (passed, k)}`` to the pool file; returns how many
    tasks were updated. A task already holding a result for that round gets it replaced."""
    records = read_pool(path)
    known = {r.id for r in records}
    unknown = sorted(set(results) - known)
    if unknown:
        raise PoolError(f"{path}: no task with id {', '.join(unknown[:5])}")
    updated = []
    for r in records:
        if r.id in results:
            passed, k = results[r.id]
            history = tuple(x for x in r.pass_rates if x.round != round) + (PassRate(round, k, passed),)
            r = attrs.evolve(r, pass_rates=tuple(sorted(history, key=lambda x: x.round)))
        updated.append(r)
    write_pool(path, updated)
    return len(results)


def accepted_problems(records: Iterable[TaskRecord]) -> list[Problem]:
    """The tasks that passed every gate, as problems for the Coder and the evaluator."""
    return [r.to_problem() for r in records if r.accepted]


def template(code: str) -> str:
    """A module's structural signature: the sha256 of its normalised token list (kzcore.fingerprints'
    `normalized_tokens`, the decontamination rule's step 1: identifiers become ID, numbers NUM, strings STR;
    docstrings, comments, imports, annotations and the KZ_SIZES table are dropped; torch names are kept in one
    spelling). Two modules that make the same torch calls in the same order and differ only in names, sizes
    or other constants share a template, so a Proposer that refills one skeleton shows up as one template
    even when every module has its own dedup key. A module that does not parse is its own template."""
    from kzcore.fingerprints import DecontamError, normalized_tokens  # lazy: fingerprints imports kzcore.proposer

    try:
        signature = "\x1f".join(normalized_tokens(code))
    except DecontamError:
        signature = "unparsed\x1f" + code
    return hashlib.sha256(signature.encode()).hexdigest()


@attrs.frozen
class Diversity:
    """How varied the accepted modules among some records are: ``accepted`` modules, ``api_sets`` distinct
    requested API sets (order ignored), ``dedup_keys`` distinct dedup keys, and ``top_template_share`` the
    share of them that have the most common `template`. With nothing accepted the share is None, not 0, so
    an empty phase cannot read as perfect diversity."""

    accepted: int
    api_sets: int
    dedup_keys: int
    top_template_share: float | None

    def to_metrics(self) -> dict:
        """The training metrics' names for the figures (docs/training.md)."""
        return {
            "accepted_api_sets": self.api_sets,
            "accepted_dedup_keys": self.dedup_keys,
            "top_template_share": self.top_template_share,
        }


def diversity(records: Iterable[TaskRecord]) -> Diversity:
    """The `Diversity` of the accepted modules among ``records`` (records that failed a gate are ignored)."""
    accepted = [r for r in records if r.accepted]
    templates = Counter(template(r.code) for r in accepted)
    top = templates.most_common(1)[0][1] / len(accepted) if accepted else None
    return Diversity(
        accepted=len(accepted),
        api_sets=len({frozenset(r.apis) for r in accepted}),
        dedup_keys=len({r.dedup_key for r in accepted}),
        top_template_share=top,
    )


@attrs.frozen
class PoolStats:
    total: int
    accepted: int
    failures: dict[str, int]  # gate → records that failed it (first failure only), in GATE_ORDER
    reasons: dict[str, int]  # "gate: reason" → count, most common first
    with_pass_rate: int
    pass_rates: dict[float, int]  # latest pass rate → tasks
    diversity: Diversity  # of the whole pool's accepted modules
    rounds: dict[int, Diversity]  # provenance round → the diversity of the modules proposed in it (unknown: -1)


def stats(records: list[TaskRecord], top_reasons: int = 10) -> PoolStats:
    failed = Counter(r.failed_gate for r in records if r.failed_gate)
    reasons = Counter(f"{r.failed_gate}: {r.gates[r.failed_gate].reason[:80]}" for r in records if r.failed_gate)
    rates = Counter(r.latest_pass_rate for r in records if r.accepted and r.latest_pass_rate is not None)
    by_round: dict[int, list[TaskRecord]] = {}
    for r in records:
        by_round.setdefault(_round(r), []).append(r)
    return PoolStats(
        total=len(records),
        accepted=sum(r.accepted for r in records),
        failures={name: failed[name] for name in GATE_ORDER if failed[name]},
        reasons=dict(reasons.most_common(top_reasons)),
        with_pass_rate=sum(rates.values()),
        pass_rates=dict(sorted(rates.items())),
        diversity=diversity(records),
        rounds={n: diversity(by_round[n]) for n in sorted(by_round)},
    )


def _round(record: TaskRecord) -> int:
    """The trainer round that proposed ``record`` (its provenance), -1 when it names none (``kz propose``)."""
    value = record.provenance.get("round")
    return value if isinstance(value, int) else -1


def pass_rate_histogram(records: list[TaskRecord], path: str | Path, bins: int = 10) -> Path | None:
    """A PNG histogram of the accepted tasks' latest pass rates; None when no task has one."""
    rates = [r.latest_pass_rate for r in records if r.accepted and r.latest_pass_rate is not None]
    if not rates:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(rates, bins=bins, range=(0.0, 1.0), color="#4472c4", edgecolor="white")
    ax.axvline(0.5, color="k", lw=1, ls="--")
    ax.set_xlabel("Coder pass rate (latest round)")
    ax.set_ylabel("tasks")
    ax.set_title(f"{len(rates)} tasks with a pass rate")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def to_hf_dataset(path: str | Path, cache_dir: str | Path | None = None):
    """The pool file as a ``datasets.Dataset`` (one row per record, same fields as the JSON), read with
    `read_pool` (so a torn last line is skipped). Built in memory: ``cache_dir`` is accepted and unused."""
    try:
        import datasets
    except ImportError:
        raise PoolError("to_hf_dataset needs the Hugging Face 'datasets' package: pip install datasets") from None
    path = Path(path)
    if not path.is_file():
        raise PoolError(f"task pool {path}: no such file")
    return datasets.Dataset.from_list([record.to_json() for record in read_pool(path)])
