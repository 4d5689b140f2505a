"""Convergence experiments of cooperative Dalton, in process (Dalton Fig. 14b and 15).

- :func:`convergence`: one stream with two sources (uniform, Zipf), read by ``P`` routers (half of them
  each source); per P: Dalton synced by the protocol, Dalton never syncing, and PKG; per-window max/mean
  load and replication, the time to converge, control traffic.
- :func:`dsync_trace`: two routers, the reducer artificially slowed in phases (1x, 2x, 4x, none); the
  DSYNC the reducer broadcasts over time.

Times are the stream's tuple counter (1 unit = 1 tuple); :mod:`.report` writes the PNG and markdown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.sync_bench.slow_reducer import slow_reducer
from benchmarks.workloads import make_workload, tagged_batches
from router.choose.inprocess import SyncOptions, make_bus
from router.choose.runner import BenchResult, BenchSpec, run_bench
from router.partitioners import create
from router.sync.port import as_syncable

__all__ = ["ConvergenceRun", "DsyncTrace", "convergence", "convergence_time", "dsync_trace", "settle_time"]

F64 = npt.NDArray[np.float64]
DALTON = "dalton:placement=bandit,tail=hash"  # the paper's Dalton (bandit, hash tail): the Q-table protocol


@dataclass
class ConvergenceRun:
    """One line of the convergence figure: a partitioner, a router count, a sync mode."""

    label: str
    routers: int
    mode: str  # "synced", "never", "pkg"
    start: F64
    ratio: F64
    replication: F64
    summary: dict[str, float]
    sync: dict[str, Any] = field(default_factory=dict)
    converged_at: float | None = None  # tuples until the max/mean load settled


def settle_time(
    start: F64, series: F64, tolerance: float, *, excess_over: float = 0.0, smooth: int = 3
) -> float | None:
    """First window start at which the smoothed series enters the band around its steady value.

    Steady value: the median of the second half of the run; band: ``tolerance`` times the steady value's
    excess over ``excess_over`` (``1.0`` for ratios like max/mean or replication); smoothing: a trailing
    moving mean over ``smooth`` windows. First entry, not "stays inside": per-window values are noisy.
    """
    if series.size < 2 * smooth:
        return None
    sm = np.convolve(series, np.ones(smooth) / smooth, mode="valid")
    steady = float(np.median(series[series.size // 2 :]))
    band = max(abs(steady - excess_over) * tolerance, 1e-9)
    inside = np.flatnonzero(np.abs(sm - steady) <= band)
    return None if inside.size == 0 else float(start[int(inside[0]) + smooth - 1])


def convergence_time(start: F64, ratio: F64, replication: F64) -> float | None:
    """When both the max/mean load and the replication reached their steady state.

    Within 25% of the steady excess over 1 (smoothed over 3 windows; see :func:`settle_time`).
    """
    a = settle_time(start, ratio, 0.25, excess_over=1.0)
    b = settle_time(start, replication, 0.25, excess_over=1.0)
    return None if a is None or b is None else max(a, b)


def _run(result: BenchResult, label: str, routers: int, mode: str) -> ConvergenceRun:
    run = result.run(label)
    if not run.ok or run.windows is None:
        raise RuntimeError(f"{label} failed: {run.error}")
    w = run.windows
    out = ConvergenceRun(label, routers, mode, w.start, w.ratio, w.replication, dict(run.summary), run.sync_stats)
    out.converged_at = convergence_time(w.start, w.ratio, w.replication)
    return out


def convergence(
    tuples: int = 200_000,
    routers: Sequence[int] = (1, 2, 4, 8),
    *,
    n: int = 8,
    dsync: int = 1_000,
    keys: int = 10_000,
    batch: int = 250,
    progress: Callable[[str], None] | None = None,
) -> list[ConvergenceRun]:
    """Synced Dalton vs never-syncing Dalton vs PKG for each router count (see the module doc)."""
    wl = make_workload(f"multi:kinds=uniform+zipf,s=1.5,keys={keys},tuples={tuples},batch={batch}")
    runs: list[ConvergenceRun] = []
    for p in routers:
        if progress is not None:
            progress(f"P={p}")
        base = {
            "n": n, "m": 4, "window": 60_000.0, "slide": 1_000.0, "routers": p, "dsync": dsync, "seed": 1,
            "batches": None,  # the workload's batches: the protocol's cadence (syncs between batches) is measured
        }  # fmt: skip
        synced = run_bench(wl, BenchSpec(partitioners=(DALTON, "pkg"), sync="protocol", **base))  # type: ignore[arg-type]
        runs.append(_run(synced, DALTON, p, "synced"))
        runs.append(_run(synced, "pkg", p, "pkg"))
        if p > 1:
            never = run_bench(wl, BenchSpec(partitioners=(DALTON,), sync="never", **base))  # type: ignore[arg-type]
            runs.append(_run(never, DALTON, p, "never"))
    return runs


@dataclass
class DsyncTrace:
    """DSYNC broadcast by the reducer over time, with the reducer delay in force."""

    times: list[float]
    dsync: list[float]
    delay_times: list[float]
    delays: list[float]
    phases: list[tuple[float, float, float]]  # (start, end, delay)
    sync: dict[str, Any]
    per_phase: list[dict[str, float]]


def dsync_trace(
    tuples: int = 400_000,
    *,
    base_delay: float = 600.0,
    initial: float = 4_000.0,
    minimum: float = 1_000.0,
    maximum: float = 64_000.0,
    n: int = 8,
    batch: int = 250,
) -> DsyncTrace:
    """Fig. 14b: reducer delay ``base``, then 2x, then 4x, then none; DSYNC adapts (doubles / halves)."""
    q = tuples / 4
    phases = [(0.0, q, base_delay), (q, 2 * q, 2 * base_delay), (2 * q, 3 * q, 4 * base_delay), (3 * q, tuples, 0.0)]

    def delay(t: float) -> float:
        return next((d for a, b, d in phases if a <= t < b), 0.0)

    wl = make_workload(f"multi:kinds=uniform+zipf,s=1.5,keys=10000,tuples={tuples},batch={batch}")
    parts = [
        create("dalton", n, window=60_000, slide=1_000, seed=1 + r, placement="bandit", tail="hash") for r in range(2)
    ]
    options = SyncOptions(dsync=initial, dsync_min=minimum, dsync_max=maximum)
    bus = make_bus([as_syncable(p) for p in parts], options, node=slow_reducer(delay))
    assert bus is not None
    times, delays = [], []
    for src, (keys, ts) in tagged_batches(wl):
        parts[src].assign(keys, ts)
        now = float(ts[-1]) + 1
        bus.tick(now)
        times.append(now)
        delays.append(delay(now))
    ds = bus.stats.dsync
    per_phase = []
    for a, b, d in phases:
        inside = [v for t, v in ds if a + (b - a) / 2 <= t < b]  # second half: after adapting
        per_phase.append({"start": a, "end": b, "delay": d, "dsync_median": float(np.median(inside)) if inside else 0})
    return DsyncTrace([t for t, _ in ds], [v for _, v in ds], times, delays, phases, bus.summary(), per_phase)
