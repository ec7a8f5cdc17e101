"""A worker plugin that passes every candidate's static check (`kz_static_check` is firstresult, and this
implementation runs first): the adversarial tests run cheats the static rules refuse through it, so that the
run-time layer behind those rules (the tamper watch, the problem watch, the thread count) is tested on its own."""

from kzcore import hookimpl


class NoStaticCheck:
    @hookimpl(tryfirst=True)
    def kz_static_check(self, language, source):
        return []


NO_STATIC_CHECK = NoStaticCheck()
