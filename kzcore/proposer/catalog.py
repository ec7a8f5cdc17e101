"""The Proposer's torch API catalog: APIs in groups, every spelling that counts as using one, constraints and a
level hint. Shipped as catalog.json next to this file; users add or override APIs with their own JSON files
(docs/proposer.md). gates.py matches a module's code against the spellings; sampler.py draws from the APIs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import attrs

from kzcore.errors import KzError

CATALOG_PATH = Path(__file__).with_name("catalog.json")
SCHEMA = 1

# Conventional import aliases a catalog may use in spellings; they are expanded to the full dotted path.
PREFIXES = {"nn.": "torch.nn.", "F.": "torch.nn.functional."}
# Binary operators a spelling "op:<symbol>" may name.
OPERATORS = ("+", "-", "*", "/", "//", "%", "**", "@")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")
_FIELDS = ("name", "group", "spellings", "dims", "dtypes", "level", "notes")


class CatalogError(KzError):
    """A catalog file is malformed (unknown group, spelling claimed by two APIs, bad field)."""


def canonical_spelling(spelling: str) -> str:
    """``"nn.Conv2d"`` → ``"torch.nn.Conv2d"``, ``"F.relu"`` → ``"torch.nn.functional.relu"``; ``torch.…``,
    ``Tensor.<method>`` and ``op:<operator>`` are kept. Anything else raises CatalogError."""
    s = spelling.strip()
    for short, full in PREFIXES.items():
        if s.startswith(short):
            s = full + s[len(short) :]
    if s.startswith("op:"):
        if s[3:] not in OPERATORS:
            raise CatalogError(f"spelling {spelling!r}: unknown operator (known: {' '.join(OPERATORS)})")
        return s
    head, _, rest = s.partition(".")
    parts = rest.split(".")
    if head not in ("torch", "Tensor") or not rest or not all(p.isidentifier() for p in parts):
        raise CatalogError(f"spelling {spelling!r}: expected nn.X, F.x, torch.x[.y], Tensor.method or op:<operator>")
    if head == "Tensor" and len(parts) != 1:
        raise CatalogError(f"spelling {spelling!r}: Tensor.<method> names one method")
    return s


@attrs.frozen
class TorchApi:
    """One API. ``spellings`` are canonical (see canonical_spelling); ``dims`` are the ranks its main input
    may have (None: any); ``level`` hints the KernelBench level of a problem built around it."""

    name: str
    group: str
    spellings: tuple[str, ...] = attrs.field(converter=tuple)
    dims: tuple[int, ...] | None = None
    dtypes: tuple[str, ...] = ("float32",)
    level: int = 1
    notes: str = ""

    def describe(self) -> str:
        """One line for a prompt: name, how to write it, constraints."""
        shown = [s.replace("torch.nn.functional.", "F.").replace("torch.nn.", "nn.") for s in self.spellings]
        parts = [f"{self.name} ({self.group}): write it as {' / '.join(shown[:4])}"]
        if self.dims:
            parts.append(f"input rank {' or '.join(map(str, self.dims))}")
        parts.append(f"dtypes {', '.join(self.dtypes)}")
        if self.notes:
            parts.append(self.notes)
        return "; ".join(parts)


@attrs.frozen
class Catalog:
    apis: tuple[TorchApi, ...]
    groups: dict[str, str] = attrs.field(hash=False)
    _index: dict[str, str] = attrs.field(init=False, hash=False, eq=False, repr=False)

    def __attrs_post_init__(self):
        object.__setattr__(self, "_index", {s: api.name for api in self.apis for s in api.spellings})

    @property
    def names(self) -> list[str]:
        return [api.name for api in self.apis]

    def get(self, name: str) -> TorchApi:
        for api in self.apis:
            if api.name == name:
                return api
        raise CatalogError(
            f"no API named {name!r} in the catalog ({len(self.apis)} APIs; see kzcore/proposer/catalog.json)"
        )

    def api_of(self, spelling: str) -> str | None:
        """The API a canonical spelling belongs to, or None."""
        return self._index.get(spelling)

    def in_group(self, group: str) -> list[TorchApi]:
        return [api for api in self.apis if api.group == group]

    def level_hint(self, names: Iterable[str]) -> int:
        """A single API keeps its own level; a combination is at least level 2 (a fusion)."""
        names = list(names)
        levels = [self.get(n).level for n in names]
        return max(levels) if len(names) == 1 else max(2, *levels)


def _api_from_row(row: dict, defaults: dict, where: str) -> TorchApi:
    if not isinstance(row, dict) or "name" not in row or "group" not in row or "spellings" not in row:
        raise CatalogError(f"{where}: each API needs 'name', 'group' and 'spellings' ({row!r:.80})")
    unknown = set(row) - set(_FIELDS)
    if unknown:
        raise CatalogError(f"{where}: API {row['name']!r} has unknown fields {sorted(unknown)}")
    merged = {**defaults, **row}
    spellings = merged["spellings"]
    if not isinstance(spellings, list) or not spellings:
        raise CatalogError(f"{where}: API {row['name']!r} needs a non-empty list of spellings")
    dims = merged.get("dims")
    if dims is not None and not (isinstance(dims, list) and all(isinstance(d, int) and d >= 0 for d in dims)):
        raise CatalogError(f"{where}: API {row['name']!r}: dims must be a list of ranks or null")
    dtypes = merged.get("dtypes") or ["float32"]
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise CatalogError(f"{where}: API {row['name']!r}: unknown dtypes {bad} (known: {', '.join(DTYPES)})")
    level = merged.get("level", 1)
    if level not in (1, 2, 3):
        raise CatalogError(f"{where}: API {row['name']!r}: level must be 1, 2 or 3, got {level!r}")
    try:
        canonical = tuple(dict.fromkeys(canonical_spelling(s) for s in spellings))
    except CatalogError as exc:
        raise CatalogError(f"{where}: API {row['name']!r}: {exc}") from None
    return TorchApi(
        name=str(merged["name"]),
        group=str(merged["group"]),
        spellings=canonical,
        dims=tuple(dims) if dims is not None else None,
        dtypes=tuple(dtypes),
        level=level,
        notes=str(merged.get("notes") or ""),
    )


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CatalogError(f"catalog {path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise CatalogError(f"catalog {path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("apis", []), list):
        raise CatalogError(f"catalog {path}: expected an object with an 'apis' list")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise CatalogError(f"catalog {path}: schema {data.get('schema')!r}, this kzcore reads schema {SCHEMA}")
    return data


def load_catalog(*paths: str | Path, builtin: bool = True) -> Catalog:
    """The shipped catalog (unless ``builtin=False``) followed by ``paths``; a later file's API replaces an
    earlier one of the same name and its groups are added. Checks that every API's group is declared and
    that no spelling belongs to two APIs."""
    files = ([CATALOG_PATH] if builtin else []) + [Path(p) for p in paths]
    if not files:
        raise CatalogError("no catalog files given")
    groups: dict[str, str] = {}
    apis: dict[str, TorchApi] = {}
    for path in files:
        data = _read(path)
        defaults = {**{"dims": None, "dtypes": ["float32"], "level": 1, "notes": ""}, **data.get("defaults", {})}
        groups.update({str(k): str(v) for k, v in data.get("groups", {}).items()})
        for i, row in enumerate(data.get("apis", [])):
            api = _api_from_row(row, defaults, f"{path}: apis[{i}]")
            apis.pop(api.name, None)  # an override moves to the end, in the order its file gives
            apis[api.name] = api
    owner: dict[str, str] = {}
    for api in apis.values():
        if api.group not in groups:
            raise CatalogError(f"API {api.name!r}: group {api.group!r} is not declared (groups: {', '.join(groups)})")
        for s in api.spellings:
            if s in owner:
                raise CatalogError(f"spelling {s!r} belongs to both {owner[s]!r} and {api.name!r}")
            owner[s] = api.name
    if not apis:
        raise CatalogError(f"catalog {', '.join(map(str, files))}: no APIs")
    return Catalog(apis=tuple(apis.values()), groups=groups)
