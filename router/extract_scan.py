r"""A compiled scan of a batch of JSON objects for a few top-level fields: key, event time, measure.

:mod:`router.extract_batch` calls :func:`scan_records` over the batch's values joined into one buffer. One pass
per record, byte by byte, checks that the value is one JSON object (the grammar of RFC 8259, nested values
included) and reads the three top-level fields the route names. A record is either *read* (its fields are
known exactly) or *in doubt*; a record in doubt goes through the extractor's per-record path (``orjson``), which
gives the exact answer or error. The scan never decides that a record is bad. It is in doubt when:

* it is not a JSON object of the grammar, or is deeper than :data:`MAX_DEPTH`;
* a string holds a ``\u`` escape (surrogate pairs are orjson's to judge), or a member name holds any escape;
* a number has an exponent beyond two digits or more than :data:`MAX_DIGITS` digits (orjson refuses numbers
  that overflow a double);
* the key is not a string without escapes, nor an integer of at most 18 digits other than ``-0``; it is empty
  or longer than the byte limit;
* the time field (when read) is not an integer of at most 16 digits in ``[0, max_time]``, or is absent;
* the measure is not null, absent, an integer of at most 15 digits, or a decimal whose digits fit 15 and whose
  power of ten is within 22 (then one IEEE multiplication or division by an exact power of ten gives the correctly
  rounded double, as orjson's parser does; a longer number is left to orjson);
* the record is larger than the route's limit.

UTF-8 is checked over the whole buffer by the caller. A member that appears twice counts by its last occurrence,
as in orjson.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import compile_loop

__all__ = ["MAX_DEPTH", "MAX_DIGITS", "READ", "scan_records"]

#: Deeper values are in doubt (orjson's own limit is 1,024 levels).
MAX_DEPTH = 512
#: Numbers with more digits are in doubt (a long integer parses as a double in orjson, and may overflow it).
MAX_DIGITS = 300
#: A record's status after the scan: its fields were read (any other status: in doubt).
READ = 1

_POW10 = np.array([10.0**i for i in range(23)], dtype=np.float64)  # exact doubles


def _ws(buf: npt.NDArray[np.uint8], i: int, hi: int) -> int:
    """The index of the first byte at or after ``i`` that is not JSON whitespace."""
    while i < hi:
        c = buf[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            break
        i += 1
    return i


def _string(buf: npt.NDArray[np.uint8], i: int, hi: int) -> tuple[int, bool]:
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


def _number(buf: npt.NDArray[np.uint8], i: int, hi: int) -> tuple[int, int, int, int, int]:
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


def _number_end(buf: npt.NDArray[np.uint8], i: int, hi: int) -> int:
    """The index after a number opening at ``i`` whose value is not read; -1 when invalid or in doubt.

    :func:`_number`'s grammar without its value: most skipped values are numbers, and the value's bookkeeping
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


def _scalar_end(buf: npt.NDArray[np.uint8], i: int, hi: int) -> int:
    """The index after a string, number or literal opening at ``i``; -1 when invalid or in doubt."""
    c = buf[i]
    if c == 34:
        end, _ = _string(buf, i, hi)
        return end
    if c == 45 or 48 <= c <= 57:
        return _number_end(buf, i, hi)
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


def _value_end(buf: npt.NDArray[np.uint8], i: int, hi: int, stack: npt.NDArray[np.uint8]) -> int:
    """The index after the JSON value opening at ``i`` (nested values checked); -1 when invalid or in doubt.

    ``stack`` holds the open containers (1: object, 2: array).
    """
    depth = 0
    while True:  # a value is expected at i
        i = _ws(buf, i, hi)
        if i >= hi:
            return -1
        c = buf[i]
        opened = False
        if c == 123 or c == 91:  # { [
            if depth == MAX_DEPTH:
                return -1
            stack[depth] = 1 if c == 123 else 2
            depth += 1
            i = _ws(buf, i + 1, hi)
            if i >= hi:
                return -1
            if buf[i] == (125 if c == 123 else 93):  # empty container
                depth -= 1
                i += 1
            else:
                opened = True
        else:
            i = _scalar_end(buf, i, hi)
            if i < 0:
                return -1
        if opened:
            if c == 123:  # a member name and its colon, then the value
                i = _member_name(buf, i, hi)
                if i < 0:
                    return -1
            continue
        while True:  # after a value: close containers, or go on to the next element
            if depth == 0:
                return i
            i = _ws(buf, i, hi)
            if i >= hi:
                return -1
            c = buf[i]
            top = stack[depth - 1]
            if c == 44:  # ,
                i = _ws(buf, i + 1, hi)
                if top == 1:
                    i = _member_name(buf, i, hi)
                    if i < 0:
                        return -1
                break
            if (c == 125 and top == 1) or (c == 93 and top == 2):
                depth -= 1
                i += 1
                continue
            return -1


def _member_name(buf: npt.NDArray[np.uint8], i: int, hi: int) -> int:
    """The index after a member name at ``i`` and its colon; -1 when invalid."""
    if i >= hi or buf[i] != 34:
        return -1
    i, _ = _string(buf, i, hi)
    if i < 0:
        return -1
    i = _ws(buf, i, hi)
    if i >= hi or buf[i] != 58:  # :
        return -1
    return i + 1


def _is_name(buf: npt.NDArray[np.uint8], a: int, b: int, name: npt.NDArray[np.uint8]) -> bool:
    """Whether ``buf[a:b]`` is ``name`` (an empty ``name`` matches nothing)."""
    n = name.shape[0]
    if n == 0 or b - a != n:
        return False
    for j in range(n):  # noqa: SIM110 - a loop numba compiles
        if buf[a + j] != name[j]:
            return False
    return True


def _scan_one(
    buf: npt.NDArray[np.uint8],
    lo: int,
    hi: int,
    names: tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8], npt.NDArray[np.uint8]],
    max_key: int,
    max_time: int,
    stack: npt.NDArray[np.uint8],
) -> tuple[int, int, int, int, float, bool]:
    """One record: (status, key start, key end, time, measure, measure is null)."""
    key_name, time_name, measure_name = names
    doubt = (0, 0, 0, 0, 0.0, True)
    ka = kb = -1
    t = -1
    x = 0.0
    null = True
    i = _ws(buf, lo, hi)
    if i >= hi or buf[i] != 123:
        return doubt
    i = _ws(buf, i + 1, hi)
    if i < hi and buf[i] == 125:
        i += 1
    else:
        while True:
            if i >= hi or buf[i] != 34:
                return doubt
            a = i + 1
            i, esc = _string(buf, i, hi)
            if i < 0 or esc:
                return doubt
            b = i - 1
            i = _ws(buf, i, hi)
            if i >= hi or buf[i] != 58:
                return doubt
            i = _ws(buf, i + 1, hi)
            if i >= hi:
                return doubt
            c = buf[i]
            if _is_name(buf, a, b, key_name):
                if c == 34:
                    end, esc = _string(buf, i, hi)
                    if end < 0 or esc:
                        return doubt
                    ka, kb = i + 1, end - 1
                elif c == 45 or 48 <= c <= 57:
                    end, kind, _, _, sig = _number(buf, i, hi)
                    if end < 0 or kind != 1 or sig > 18 or (end - i == 2 and c == 45 and buf[i + 1] == 48):
                        return doubt  # not an integer, too long, or -0 (which orjson reads as 0)
                    ka, kb = i, end
                else:
                    return doubt
                i = end
            elif _is_name(buf, a, b, time_name):
                if not 48 <= c <= 57:
                    return doubt  # negative, or not a number
                end, kind, mant, _, sig = _number(buf, i, hi)
                if end < 0 or kind != 1 or sig > 16:
                    return doubt
                t = mant
                i = end
            elif _is_name(buf, a, b, measure_name):
                if c == 45 or 48 <= c <= 57:
                    end, kind, mant, power, sig = _number(buf, i, hi)
                    if end < 0 or sig > 15:
                        return doubt
                    if kind == 1:
                        x = float(mant)  # -0 is the integer 0
                        if c == 45:
                            x = -x if mant != 0 else 0.0
                    else:
                        if power < -22 or power > 22:
                            return doubt
                        x = float(mant) * _POW10[power] if power >= 0 else float(mant) / _POW10[-power]
                        if c == 45:
                            x = -x
                    null = False
                    i = end
                elif c == 110:  # null
                    i = _scalar_end(buf, i, hi)
                    if i < 0:
                        return doubt
                    null = True
                else:
                    return doubt
            else:
                i = _value_end(buf, i, hi, stack)
                if i < 0:
                    return doubt
            i = _ws(buf, i, hi)
            if i >= hi:
                return doubt
            if buf[i] == 44:
                i = _ws(buf, i + 1, hi)
                continue
            if buf[i] == 125:
                i += 1
                break
            return doubt
    if _ws(buf, i, hi) != hi:
        return doubt
    if ka < 0 or kb <= ka or kb - ka > max_key:
        return doubt
    if time_name.shape[0] > 0 and not 0 <= t <= max_time:
        return doubt
    return READ, ka, kb, t, x, null


def _scan_records(
    buf: npt.NDArray[np.uint8],
    ends: npt.NDArray[np.int64],
    key_name: npt.NDArray[np.uint8],
    time_name: npt.NDArray[np.uint8],
    measure_name: npt.NDArray[np.uint8],
    max_record: int,
    max_key: int,
    max_time: int,
) -> tuple[
    npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.bool_],
    npt.NDArray[np.uint8], npt.NDArray[np.int32],
]:  # fmt: skip
    """Scan every record: record ``r`` is ``buf[ends[r-1]:ends[r]]`` (``ends[-1]`` counts as 0).

    Returns each record's status (:data:`READ` or in doubt), time (-1 unless read from the value), measure and
    whether it is null, and the keys of the read records gathered: their bytes and their end offsets (an
    Arrow string array's data and offsets after a leading 0; a record in doubt has an empty key there).
    ``time_name`` and ``measure_name`` are empty when the route does not read them from the value.
    """
    n = ends.shape[0]
    status = np.zeros(n, np.uint8)
    times = np.full(n, -1, np.int64)
    measures = np.zeros(n, np.float64)
    nulls = np.ones(n, np.bool_)
    key_a = np.zeros(n, np.int64)
    key_b = np.zeros(n, np.int64)
    stack = np.zeros(MAX_DEPTH, np.uint8)
    names = (key_name, time_name, measure_name)
    lo = 0
    total = 0
    for r in range(n):
        hi = ends[r]
        if hi - lo <= max_record:
            s, ka, kb, t, x, null = _scan_one(buf, lo, hi, names, max_key, max_time, stack)
            if s == READ:
                status[r] = READ
                key_a[r] = ka
                key_b[r] = kb
                times[r] = t
                measures[r] = x
                nulls[r] = null
                total += kb - ka
        lo = hi
    keys = np.empty(total, np.uint8)
    offsets = np.zeros(n + 1, np.int32)
    k = 0
    for r in range(n):
        for j in range(key_a[r], key_b[r]):
            keys[k] = buf[j]
            k += 1
        offsets[r + 1] = k
    return status, times, measures, nulls, keys, offsets


_ws = compile_loop(_ws)
_string = compile_loop(_string)
_number = compile_loop(_number)
_number_end = compile_loop(_number_end)
_scalar_end = compile_loop(_scalar_end)
_member_name = compile_loop(_member_name)
_value_end = compile_loop(_value_end)
_is_name = compile_loop(_is_name)
_scan_one = compile_loop(_scan_one)
scan_records = compile_loop(_scan_records)
