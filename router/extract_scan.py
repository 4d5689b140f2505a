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

from router.json_grammar import (
    MAX_DEPTH,
    MAX_DIGITS,
    is_name,
    read_number,
    scalar_end,
    skip_ws,
    string_end,
    value_end,
)
from router.partitioners.accel import compile_loop

__all__ = ["MAX_DEPTH", "MAX_DIGITS", "READ", "scan_records"]

#: A record's status after the scan: its fields were read (any other status: in doubt).
READ = 1

_POW10 = np.array([10.0**i for i in range(23)], dtype=np.float64)  # exact doubles


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
    i = skip_ws(buf, lo, hi)
    if i >= hi or buf[i] != 123:
        return doubt
    i = skip_ws(buf, i + 1, hi)
    if i < hi and buf[i] == 125:
        i += 1
    else:
        while True:
            if i >= hi or buf[i] != 34:
                return doubt
            a = i + 1
            i, esc = string_end(buf, i, hi)
            if i < 0 or esc:
                return doubt
            b = i - 1
            i = skip_ws(buf, i, hi)
            if i >= hi or buf[i] != 58:
                return doubt
            i = skip_ws(buf, i + 1, hi)
            if i >= hi:
                return doubt
            c = buf[i]
            if is_name(buf, a, b, key_name):
                if c == 34:
                    end, esc = string_end(buf, i, hi)
                    if end < 0 or esc:
                        return doubt
                    ka, kb = i + 1, end - 1
                elif c == 45 or 48 <= c <= 57:
                    end, kind, _, _, sig = read_number(buf, i, hi)
                    if end < 0 or kind != 1 or sig > 18 or (end - i == 2 and c == 45 and buf[i + 1] == 48):
                        return doubt  # not an integer, too long, or -0 (which orjson reads as 0)
                    ka, kb = i, end
                else:
                    return doubt
                i = end
            elif is_name(buf, a, b, time_name):
                if not 48 <= c <= 57:
                    return doubt  # negative, or not a number
                end, kind, mant, _, sig = read_number(buf, i, hi)
                if end < 0 or kind != 1 or sig > 16:
                    return doubt
                t = mant
                i = end
            elif is_name(buf, a, b, measure_name):
                if c == 45 or 48 <= c <= 57:
                    end, kind, mant, power, sig = read_number(buf, i, hi)
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
                    i = scalar_end(buf, i, hi)
                    if i < 0:
                        return doubt
                    null = True
                else:
                    return doubt
            else:
                i = value_end(buf, i, hi, stack)
                if i < 0:
                    return doubt
            i = skip_ws(buf, i, hi)
            if i >= hi:
                return doubt
            if buf[i] == 44:
                i = skip_ws(buf, i + 1, hi)
                continue
            if buf[i] == 125:
                i += 1
                break
            return doubt
    if skip_ws(buf, i, hi) != hi:
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


_scan_one = compile_loop(_scan_one)
scan_records = compile_loop(_scan_records)
