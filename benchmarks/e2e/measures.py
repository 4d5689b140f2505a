"""Pure computations of the end-to-end benchmark: per-record latency, makespan, percentiles, process CPU.

Latency of a record (what a user of the results topic sees): the time the first result of its
``(window, key)`` that counts it was written, minus the time the record was produced. The Spark sink writes
*full* aggregates (update mode), so the results of one ``(window, key)`` carry non-decreasing counts; the
``r``-th record of the group in production order is counted once a result shows ``count >= r``. When records
of a group are processed out of production order this credits the earlier records first -- the figure is the
delay until the results reflect as many records of the group as had been produced up to this one.

Makespan: the combiner stage of a micro-batch is a set of tasks with measured run times; Spark hands them in
index order to whichever of its ``C`` task slots frees first (list scheduling). :func:`list_schedule` replays
that for any ``C``, so the measured task times of a run on 2 cores say what the stage would take on 8 or 32.

Floor of the partials: :func:`partials_floor` is the fewest partial aggregates a backlog's micro-batches could
ship with every combiner task within 1.05x the mean, knowing each micro-batch's exact counts (the sweep's floor,
counted per ``(window, key)`` group as the job aggregates).

Warm-up: the Spark session keeps getting faster over its first few hundred thousand records (JIT, Python
workers); :func:`settled` says when two consecutive warm-up passes drain at rates close enough to stop warming.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = [
    "drift",
    "list_schedule",
    "partials_floor",
    "percentiles",
    "record_latencies",
    "settled",
    "tree_cpu_seconds",
]


def list_schedule(task_ms: Sequence[float], cores: int) -> float:
    """Makespan of ``task_ms`` run in order on ``cores`` slots, each task going to the earliest free slot."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    slots = [0.0] * min(cores, max(1, len(task_ms)))
    for t in task_ms:
        if t < 0:
            raise ValueError(f"task time must be >= 0, got {t}")
        i = min(range(len(slots)), key=slots.__getitem__)
        slots[i] += float(t)
    return max(slots)


def partials_floor(
    keys: npt.ArrayLike, times: npt.ArrayLike, batch: int, n: int, window_ms: int, target: float = 1.05
) -> list[float]:
    """Per whole micro-batch of ``batch`` records (the input in event-time order): the fewest partials possible.

    A partial is one ``(window, key)`` group on one combiner. With every one of the ``n`` combiners holding at
    most ``cap = floor(target * batch / n)`` records, a group of ``c`` records of the micro-batch reaches at
    least ``ceil(c / cap)`` combiners; the sum over its groups is the micro-batch's floor. Spark's micro-batches
    of a routed topic span more event time when routers interleave their outputs, so the floor is of the
    micro-batches an event-time-ordered topic would give.
    """
    t = np.asarray(times, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    key_ids = np.unique(np.asarray(keys)[order], return_inverse=True)[1].reshape(-1).astype(np.int64)
    full = t.shape[0] // batch * batch
    if full == 0:
        return []
    window = t[order][:full] // window_ms
    window -= window.min()
    group = window * (int(key_ids.max()) + 1) + key_ids[:full]
    span = int(group.max()) + 1
    chunk = np.arange(full, dtype=np.int64) // batch
    pairs, counts = np.unique(chunk * span + group, return_counts=True)
    cap = max(1, int(target * batch / n))
    pieces = np.bincount(pairs // span, weights=np.ceil(counts / cap), minlength=full // batch)
    return [float(x) for x in pieces]


def drift(first: float | None, again: float | None) -> float | None:
    """Relative change of a rate measured twice: ``again / first - 1`` (``None`` when either is missing or 0)."""
    if first is None or again is None or first <= 0 or not np.isfinite(first) or not np.isfinite(again):
        return None
    return again / first - 1.0


def settled(rates: Sequence[float | None], tolerance: float) -> bool:
    """Whether the last two rates differ by at most ``tolerance`` of the larger one (two are needed)."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    if len(rates) < 2:
        return False
    a, b = rates[-2], rates[-1]
    if a is None or b is None or a <= 0 or b <= 0:
        return False
    return abs(a - b) <= tolerance * max(a, b)


def percentiles(values: npt.ArrayLike, qs: Sequence[float] = (50, 95, 99)) -> dict[str, float | None]:
    """``{"p50": ..., ...}`` of ``values`` (``None`` each when empty)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return {f"p{q:g}": None for q in qs}
    return {f"p{q:g}": float(np.percentile(arr, q)) for q in qs}


def record_latencies(
    group: npt.NDArray[np.int64],
    produced_s: npt.NDArray[np.float64],
    result_group: npt.NDArray[np.int64],
    result_count: npt.NDArray[np.int64],
    result_s: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Seconds from each record's production to the first result of its group counting it (see module doc).

    ``group[i]`` is record ``i``'s ``(window, key)`` id and ``produced_s[i]`` its production time; results are
    ``(result_group, result_count, result_s)`` triples (any order). Records of a group are ranked by production
    time. A record no result counts gets NaN.
    """
    group = np.asarray(group, dtype=np.int64)
    produced_s = np.asarray(produced_s, dtype=np.float64)
    if group.shape != produced_s.shape:
        raise ValueError(f"group and produced_s differ in length: {group.size} vs {produced_s.size}")
    out = np.full(group.size, np.nan)
    if group.size == 0 or np.asarray(result_group).size == 0:
        return out
    order = np.lexsort((produced_s, group))  # by group, then production time
    g_sorted = group[order]
    starts = np.r_[0, np.flatnonzero(np.diff(g_sorted)) + 1]
    sizes = np.diff(np.r_[starts, g_sorted.size])
    rank = np.arange(g_sorted.size) - np.repeat(starts, sizes) + 1
    big = int(max(int(rank.max()), int(np.max(result_count)))) + 1
    rg = np.asarray(result_group, dtype=np.int64)
    rc = np.asarray(result_count, dtype=np.int64)
    rs = np.asarray(result_s, dtype=np.float64)
    r_order = np.lexsort((rs, rc, rg))
    rg, rc, rs = rg[r_order], rc[r_order], rs[r_order]
    # Counts only grow, but the results topic is read per partition: take the earliest time at or above a count.
    for lo, hi in _runs(rg):
        rs[lo:hi] = np.minimum.accumulate(rs[lo:hi][::-1])[::-1]
    combined = rg * big + rc
    idx = np.searchsorted(combined, g_sorted * big + rank, side="left")
    ok = idx < combined.size
    ok[ok] &= rg[idx[ok]] == g_sorted[ok]
    lat = np.full(g_sorted.size, np.nan)
    lat[ok] = rs[idx[ok]] - produced_s[order][ok]
    out[order] = lat
    return out


def _runs(sorted_ids: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
    if sorted_ids.size == 0:
        return []
    bounds = np.r_[0, np.flatnonzero(np.diff(sorted_ids)) + 1, sorted_ids.size]
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _stat(pid: int) -> tuple[int, list[str]] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields  # parent pid, the fields after the command name


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and every live descendant, plus what their reaped children used.

    Read from ``/proc`` (Linux); NaN when ``root`` is gone. Known gap: a descendant that exits between two
    readings and is not reaped by a member of the tree (Spark restarting its Python workers) takes its CPU
    with it, so a delta over such a phase undercounts and can even come out negative.
    """
    stats: dict[int, tuple[int, list[str]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                stats[int(entry.name)] = st
    if root not in stats:
        return float("nan")
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        f = stats[pid][1]
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])  # utime stime cutime cstime
        todo.extend(children.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")
