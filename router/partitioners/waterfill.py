"""Least-waiting-time assignment of many tuples at once (FISH Alg. 3, batched).

The per-tuple rule sends each tuple to the candidate with the smallest waiting time ``C_w * P_w`` (ties:
the earlier candidate) and then adds one tuple to ``C_w``. These helpers give the outcome of ``c``
consecutive tuples of one key in one step, and a tight loop for a run of one-tuple keys.
``loads`` is the list of ``C_w`` (mutated in place); ``ptime`` the list of ``P_w`` or ``None`` (all equal).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import choice_kernels

__all__ = ["level_fill", "pair_fill", "pkg_fill", "pkg_fill_many", "two_choice", "two_choice_many"]

I64 = npt.NDArray[np.int64]


def pair_fill(la: float, lb: float, c: int) -> int:
    """Tuples (of ``c``) that go to candidate ``a`` (equal ``P``): the per-tuple greedy in closed form.

    ``a`` takes tuples while ``C_a <= C_b``, ``b`` while ``C_b < C_a``; once level they alternate.
    """
    if la <= lb:
        first = min(c, math.floor(lb - la) + 1)
        return first + (c - first) // 2
    first = min(c, math.ceil(la - lb))
    return (c - first + 1) // 2


def pkg_fill(first: list[int], second: list[int], counts: list[int], loads: list[float]) -> list[int]:
    """:func:`pair_fill` for a run of two-candidate keys (equal ``P``): tuples each key sends to ``first``.

    Keys in order; ``loads`` is updated as they go.
    """
    out: list[int] = []
    put = out.append
    for a, b, c in zip(first, second, counts, strict=True):
        la, lb = loads[a], loads[b]
        xa = pair_fill(la, lb, c)
        loads[a] = la + xa
        loads[b] = lb + c - xa
        put(xa)
    return out


def level_fill(cands: Sequence[int], c: int, loads: Sequence[float], ptime: Sequence[float] | None) -> list[int]:
    """Tuples per candidate when ``c`` tuples go one by one to the smallest ``C_w * P_w`` (ties: first).

    ``cands`` index ``loads`` (and ``ptime``), in priority order; the result is parallel to ``cands`` and
    ``loads`` is not changed. With ``ptime=None`` this is PKG's greedy as well
    (:func:`router.partitioners.pkg.greedy_fill`). Up to two tuples per candidate are simulated; above that
    a closed-form common level is computed and the rounding remainder (fewer tuples than candidates) is
    placed one by one.
    """
    k = len(cands)
    step = [1.0] * k if ptime is None else [ptime[w] for w in cands]
    wait = [loads[w] * s for w, s in zip(cands, step, strict=True)]
    x = [0] * k
    rest = c
    if c > 2 * k:
        order = sorted(range(k), key=wait.__getitem__)
        num = den = level = 0.0
        for m, i in enumerate(order):
            num += wait[i] / step[i]
            den += 1.0 / step[i]
            level = (c + num) / den
            if m + 1 == k or level <= wait[order[m + 1]]:
                break
        for i in range(k):
            if wait[i] < level:
                x[i] = min(rest, max(0, math.floor((level - wait[i]) / step[i])))
                rest -= x[i]
                wait[i] += x[i] * step[i]
    for _ in range(rest):
        i = min(range(k), key=wait.__getitem__)
        x[i] += 1
        wait[i] += step[i]
    return x


def two_choice(first: list[int], second: list[int], loads: list[float], ptime: list[float] | None) -> list[int]:
    """One tuple per key, keys in order: the candidate with the smaller waiting time (ties: ``first``).

    Updates ``loads`` (``C_w``, as floats); without ``ptime`` every ``P_w`` is 1 (``x * 1.0`` and ``x / 1.0``
    are exact, so the waiting time is the load). The compiled twin is
    :func:`router.partitioners.kernels_choice.two_choice_weighted`.
    """
    out: list[int] = []
    put = out.append
    if ptime is None:
        ptime = [1.0] * len(loads)
    wait = [w * s for w, s in zip(loads, ptime, strict=True)]
    for a, b in zip(first, second, strict=True):
        if wait[a] <= wait[b]:
            wait[a] += ptime[a]
            put(a)
        else:
            wait[b] += ptime[b]
            put(b)
    loads[:] = [w / s for w, s in zip(wait, ptime, strict=True)]
    return out


def pkg_fill_many(first: I64, second: I64, counts: I64, loads: list[float]) -> I64:
    """:func:`pkg_fill` on arrays: the compiled loop when numba is there (same decisions), else the Python one."""
    kernels = choice_kernels()
    if kernels is None:
        return np.array(pkg_fill(first.tolist(), second.tolist(), counts.tolist(), loads), dtype=np.int64)
    arr = np.array(loads, dtype=np.float64)
    out = np.empty(first.shape[0], dtype=np.int64)
    kernels.pkg_fill_kernel(first, second, counts, arr, out)
    loads[:] = arr.tolist()
    return out


def two_choice_many(first: I64, second: I64, loads: list[float], ptime: list[float] | None) -> I64:
    """:func:`two_choice` on arrays: the compiled loop when numba is there (same decisions), else the Python one."""
    kernels = choice_kernels()
    if kernels is None:
        return np.array(two_choice(first.tolist(), second.tolist(), loads, ptime), dtype=np.int64)
    out = np.empty(first.shape[0], dtype=np.int64)
    step = np.ones(len(loads)) if ptime is None else np.array(ptime, dtype=np.float64)  # x * 1.0, x / 1.0: exact
    wait = np.array(loads, dtype=np.float64) * step
    kernels.two_choice_weighted(first, second, wait, step, out)
    loads[:] = (wait / step).tolist()
    return out
