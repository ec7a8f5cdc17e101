"""``--eval KEY=VALUE,...``: `EvalConfig` settings a bench runs with instead of their defaults (e.g.
``--eval min_reps=24,timed_spots=0``), so one GPU call can measure a setting beside the default. Each value is
read as its field's type and the whole set is validated by `EvalConfig` itself; the report records it."""

from __future__ import annotations

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def eval_overrides(text: str) -> dict:
    """``"min_reps=24,flush_l2=false"`` -> ``{"min_reps": 24, "flush_l2": False}``; ValueError (one line) for an
    unknown setting, a value its type cannot read, or one `EvalConfig` refuses."""
    import attrs

    from kzcore.types import EvalConfig

    fields = {f.name: f for f in attrs.fields(EvalConfig)}
    out: dict = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in fields:
            raise ValueError(f"--eval: {item!r} is not KEY=VALUE with KEY an EvalConfig setting")
        default = fields[key].default
        try:
            if isinstance(default, bool):
                if value.lower() not in TRUE + FALSE:
                    raise ValueError(value)
                out[key] = value.lower() in TRUE
            elif isinstance(default, int):
                out[key] = int(value)
            elif isinstance(default, float):
                out[key] = float(value)
            else:
                out[key] = value
        except ValueError:
            raise ValueError(f"--eval: {key}={value!r} is not a {type(default).__name__}") from None
    try:
        attrs.evolve(EvalConfig(), **out)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--eval: {exc}") from None
    return out
