"""Typed scalar arguments for kernel launches: ``i32(n)``, ``f32(eps)``, ...

A kernel's scalar parameter takes exactly the wrapper of its C type (``int`` → ``i32``, ``float`` → ``f32``):
a bare Python int or float is refused, because its C width is a guess (a launcher that passes it as a
64-bit integer or a double corrupts every later argument of a kernel expecting ``int`` or ``float``).
"""

from __future__ import annotations

import ctypes
import math
import numbers
import operator


class Scalar:
    """A value with a fixed C type. Subclasses set ``kind``, ``ctype`` and the integer range if any."""

    kind = ""
    ctype: type = ctypes.c_int32
    bounds: tuple[int, int] | None = None

    __slots__ = ("value",)

    def __init__(self, value):
        if self.bounds is None:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{self.kind}() takes a number, got {type(value).__name__}")
            self.value = float(value)
            if self.kind == "f32" and math.isfinite(self.value) and abs(self.value) > 3.4028234663852886e38:
                raise OverflowError(f"{self.kind}({value!r}) is out of float range")
            return
        if isinstance(value, bool):
            raise TypeError(f"{self.kind}() takes an integer, got bool")
        try:
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"{self.kind}() takes an integer, got {type(value).__name__}") from None
        lo, hi = self.bounds
        if not lo <= v <= hi:
            raise OverflowError(f"{self.kind}({v}) is out of range [{lo}, {hi}]")
        self.value = v

    def as_ctype(self):
        return self.ctype(self.value)

    def __repr__(self) -> str:
        return f"{self.kind}({self.value!r})"


# Lower-case class names on purpose: they read as the C types they stand for, as in the launcher docs.
class i32(Scalar):
    kind, ctype, bounds = "i32", ctypes.c_int32, (-(2**31), 2**31 - 1)
    __slots__ = ()


class u32(Scalar):
    kind, ctype, bounds = "u32", ctypes.c_uint32, (0, 2**32 - 1)
    __slots__ = ()


class i64(Scalar):
    kind, ctype, bounds = "i64", ctypes.c_int64, (-(2**63), 2**63 - 1)
    __slots__ = ()


class u64(Scalar):
    kind, ctype, bounds = "u64", ctypes.c_uint64, (0, 2**64 - 1)
    __slots__ = ()


class f32(Scalar):
    kind, ctype, bounds = "f32", ctypes.c_float, None
    __slots__ = ()


class f64(Scalar):
    kind, ctype, bounds = "f64", ctypes.c_double, None
    __slots__ = ()


WRAPPERS: dict[str, type[Scalar]] = {cls.kind: cls for cls in (i32, u32, i64, u64, f32, f64)}
