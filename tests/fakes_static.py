"""A worker plugin that passes every candidate's static check (`kz_static_check` is firstresult, and this
implementation runs first), and the static rules that came after the run-time defences the adversarial and fault
fixtures were written against. A fixture those rules refuse runs through a pool with ``NO_STATIC_CHECK``, so that
the layer behind the static check (the tamper and problem watches, the launch checks, the sandbox and the pool)
is what its test measures."""

from kzcore import hookimpl

# the messages of the later rules: the allow lists of imports and dunders, the module table, and attributes set on
# an object the module fetched (kzcore.evaluate.static)
LATER_RULES = (
    "is not allowed in a kernel module (only ",
    "reaches into Python internals (a dunder)",
    "which Python runs at moments the module does not choose",
    "the interpreter's module table",
    "an attribute of an object the module did not define",
)


def only_later_rules(problems: list[str]) -> bool:
    """Whether the static check's ``problems`` (possibly none) all come from `LATER_RULES`."""
    return all(any(rule in p for rule in LATER_RULES) for p in problems)


class NoStaticCheck:
    @hookimpl(tryfirst=True)
    def kz_static_check(self, language, source):
        return []


NO_STATIC_CHECK = NoStaticCheck()
BARE = "tests.fakes_static:NO_STATIC_CHECK"  # the plugin spec a pool's ``plugins`` takes
