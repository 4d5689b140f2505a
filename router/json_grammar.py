r"""JSON grammar for the compiled scan of :mod:`router.extract_scan`: where a value opening at a byte ends.

Each function takes the batch's joined bytes ``buf``, the index ``i`` where something opens and the record's end
``hi``, and returns the index after it, or -1 when the bytes are not that grammar (RFC 8259) or are something the
scan leaves to orjson (a ``\u`` escape, a long exponent, too many digits, too deep a nesting). Compiled by numba
(:func:`router.partitioners.accel.compile_loop`); they call one another, and :mod:`router.extract_scan` calls
them. numba checks a cached loop against its own file only: after editing this one, delete the scan's cached
``.nbi``/``.nbc`` files in ``router/__pycache__``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import compile_loop

__all__ = [
    "MAX_DEPTH",
    "MAX_DIGITS",
    "is_name",
    "member_name_end",
    "number_end",
    "read_number",
    "scalar_end",
    "skip_ws",
    "string_end",
    "value_end",
]

#: Deeper values are in doubt (orjson's own limit is 1,024 levels).
MAX_DEPTH = 512
#: Numbers with more digits are in doubt (a long integer parses as a double in orjson, and may overflow it).
MAX_DIGITS = 300


def skip_ws(buf: npt.NDArray[np.uint8], i: int, hi: int) -> int:
    """The index of the first byte at or after ``i`` that is not JSON whitespace."""
    while i < hi:
        c = buf[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            break
        i += 1
    return i


def string_end(buf: npt.NDArray[np.uint8], i: int, hi: int) -> tuple[int, bool]:
    """The index after the string opening at ``i`` and whether it holds escapes; -1 when invalid or in doubt."""
    i += 1
    esc = False
    while i < hi:
        c = buf[i]
        if c == 34:  # "
            return i + 1, esc
        if c == 92:  # backslash
            if i + 1 >= hi:
                return -1, esc
            d = buf[i + 1]
            # " \ / b f n r t; \u is left to orjson (surrogates)
            if d == 34 or d == 92 or d == 47 or d == 98 or d == 102 or d == 110 or d == 114 or d == 116:
                esc = True
                i += 2
                continue
            return -1, esc
        if c < 32:
            return -1, esc
        i += 1
    return -1, esc


def read_number(buf: npt.NDArray[np.uint8], i: int, hi: int) -> tuple[int, int, int, int, int]:
    """A number opening at ``i``: (end, kind, mantissa, power of ten, significant digits); end -1 when in doubt.

    ``kind`` is 1 for an integer, 2 for a number with a fraction or exponent. Its value is
    ``± mantissa * 10**power``, exactly when it has at most 18 significant digits; the sign is the byte at ``i``.
    """
    neg = buf[i] == 45
    if neg:
        i += 1
    if i >= hi:
        return -1, 0, 0, 0, 0
    c = buf[i]
    mant = 0
    sig = 0
    digits = 0
    if c == 48:  # a leading 0 stands alone
        i += 1
        digits = 1
    elif 49 <= c <= 57:
        while i < hi and 48 <= buf[i] <= 57:
            if sig < 18:
                mant = mant * 10 + (buf[i] - 48)
            sig += 1
            digits += 1
            i += 1
    else:
        return -1, 0, 0, 0, 0
    kind = 1
    power = 0 if sig <= 18 else sig - 18
    if i < hi and buf[i] == 46:  # .
        kind = 2
        i += 1
        start = i
        while i < hi and 48 <= buf[i] <= 57:
            d = buf[i] - 48
            if sig > 0 or d != 0:
                if sig < 18:
                    mant = mant * 10 + d
                    power -= 1
                sig += 1
            else:
                power -= 1  # a leading zero of the fraction
            digits += 1
            i += 1
        if i == start:
            return -1, 0, 0, 0, 0
    if i < hi and (buf[i] == 101 or buf[i] == 69):  # e E
        kind = 2
        i += 1
        eneg = False
        if i < hi and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        start = i
        e = 0
        while i < hi and 48 <= buf[i] <= 57:
            e = e * 10 + (buf[i] - 48)
            i += 1
        if i == start or i - start > 2:
            return -1, 0, 0, 0, 0
        power += -e if eneg else e
    if digits > MAX_DIGITS:
        return -1, 0, 0, 0, 0
    return i, kind, mant, power, sig


def number_end(buf: npt.NDArray[np.uint8], i: int, hi: int) -> int:
    """The index after a number opening at ``i`` whose value is not read; -1 when invalid or in doubt.

    :func:`read_number`'s grammar without its value: most skipped values are numbers, and the value's bookkeeping
    made skipping them cost a third more.
    """
    start = i
    if buf[i] == 45:
        i += 1
    if i >= hi:
        return -1
    if buf[i] == 48:
        i += 1
    elif 49 <= buf[i] <= 57:
        while i < hi and 48 <= buf[i] <= 57:
            i += 1
    else:
        return -1
    if i < hi and buf[i] == 46:
        i += 1
        frac = i
        while i < hi and 48 <= buf[i] <= 57:
            i += 1
        if i == frac:
            return -1
    if i < hi and (buf[i] == 101 or buf[i] == 69):
        i += 1
        if i < hi and (buf[i] == 43 or buf[i] == 45):
            i += 1
        exp = i
        while i < hi and 48 <= buf[i] <= 57:
            i += 1
        if i == exp or i - exp > 2:
            return -1
    if i - start > MAX_DIGITS:
        return -1
    return i


def scalar_end(buf: npt.NDArray[np.uint8], i: int, hi: int) -> int:
    """The index after a string, number or literal opening at ``i``; -1 when invalid or in doubt."""
    c = buf[i]
    if c == 34:
        end, _ = string_end(buf, i, hi)
        return end
    if c == 45 or 48 <= c <= 57:
        return number_end(buf, i, hi)
    if c == 116 and i + 4 <= hi and buf[i + 1] == 114 and buf[i + 2] == 117 and buf[i + 3] == 101:  # true
        return i + 4
    if c == 110 and i + 4 <= hi and buf[i + 1] == 117 and buf[i + 2] == 108 and buf[i + 3] == 108:  # null
        return i + 4
    if (
        c == 102 and i + 5 <= hi and buf[i + 1] == 97 and buf[i + 2] == 108 and buf[i + 3] == 115
        and buf[i + 4] == 101
    ):  # false  # fmt: skip
        return i + 5
    return -1


def value_end(buf: npt.NDArray[np.uint8], i: int, hi: int, stack: npt.NDArray[np.uint8]) -> int:
    """The index after the JSON value opening at ``i`` (nested values checked); -1 when invalid or in doubt.

    ``stack`` holds the open containers (1: object, 2: array).
    """
    depth = 0
    while True:  # a value is expected at i
        i = skip_ws(buf, i, hi)
        if i >= hi:
            return -1
        c = buf[i]
        opened = False
        if c == 123 or c == 91:  # { [
            if depth == MAX_DEPTH:
                return -1
            stack[depth] = 1 if c == 123 else 2
            depth += 1
            i = skip_ws(buf, i + 1, hi)
            if i >= hi:
                return -1
            if buf[i] == (125 if c == 123 else 93):  # empty container
                depth -= 1
                i += 1
            else:
                opened = True
        else:
            i = scalar_end(buf, i, hi)
            if i < 0:
                return -1
        if opened:
            if c == 123:  # a member name and its colon, then the value
                i = member_name_end(buf, i, hi)
                if i < 0:
                    return -1
            continue
        while True:  # after a value: close containers, or go on to the next element
            if depth == 0:
                return i
            i = skip_ws(buf, i, hi)
            if i >= hi:
                return -1
            c = buf[i]
            top = stack[depth - 1]
            if c == 44:  # ,
                i = skip_ws(buf, i + 1, hi)
                if top == 1:
                    i = member_name_end(buf, i, hi)
                    if i < 0:
                        return -1
                break
            if (c == 125 and top == 1) or (c == 93 and top == 2):
                depth -= 1
                i += 1
                continue
            return -1


def member_name_end(buf: npt.NDArray[np.uint8], i: int, hi: int) -> int:
    """The index after a member name at ``i`` and its colon; -1 when invalid."""
    if i >= hi or buf[i] != 34:
        return -1
    i, _ = string_end(buf, i, hi)
    if i < 0:
        return -1
    i = skip_ws(buf, i, hi)
    if i >= hi or buf[i] != 58:  # :
        return -1
    return i + 1


def is_name(buf: npt.NDArray[np.uint8], a: int, b: int, name: npt.NDArray[np.uint8]) -> bool:
    """Whether ``buf[a:b]`` is ``name`` (an empty ``name`` matches nothing)."""
    n = name.shape[0]
    if n == 0 or b - a != n:
        return False
    for j in range(n):  # noqa: SIM110 - a loop numba compiles
        if buf[a + j] != name[j]:
            return False
    return True


skip_ws = compile_loop(skip_ws)
string_end = compile_loop(string_end)
read_number = compile_loop(read_number)
number_end = compile_loop(number_end)
scalar_end = compile_loop(scalar_end)
member_name_end = compile_loop(member_name_end)
value_end = compile_loop(value_end)
is_name = compile_loop(is_name)
