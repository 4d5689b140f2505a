"""The benchmark runner: P router instances per partitioner, side by side on one stream.

The workload's stream is cut into router batches of random sizes (``batches``, 100..5,000 tuples by default;
per source), so batches do not line up with the micro-batch the metrics are computed over (``metric_window``,
default one slide: with Spark the slide is the trigger, window = 12 slides by default). Each batch is split
among ``P`` routers (per tuple round-robin, or by the key when ``raw_keys="partitioned"``, as a raw topic
keyed by the record key is read; one source per router group for a multi-source workload). Dalton's routers
are told what a deployment tells them (``routers`` and ``raw_keys``, unless the label sets them). Every
partitioner's routers assign it in turn, so all partitioners
are timed under the same machine conditions. The routers' outputs are put back in stream order and the
per-window metrics are computed over that *combined* output. Partitioners that implement ``merge`` are
synchronised every ``dsync`` tuples (:func:`sync_routers`). A partitioner that fails (not implemented
yet, bad parameter) is recorded with its error instead of aborting the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import mmh3
import numpy as np
import numpy.typing as npt

from connectors.workload_types import Workload, parse_spec, tagged_batches
from router.choose.measure import BATCH_SIZES, WindowMetrics, summarise, window_metrics
from router.partitioners import Partitioner, available, create
from router.sync.port import SyncablePartitioner

__all__ = ["BenchResult", "BenchSpec", "PartitionerRun", "key_owner", "run_bench", "sync_routers"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class BenchSpec:
    """What to run. ``partitioners`` are names, optionally with parameters: ``"pkg:d=5"``."""

    partitioners: tuple[str, ...] = ()
    n: int = 8
    m: int = 4
    window: float = 240_000  # 12 slides
    slide: float = 20_000  # the micro-batch (Spark trigger) the metrics are computed per
    routers: int = 1
    dsync: int = 10_000
    c: float = 1.0
    metric_window: float | None = None  # default: one slide (tumbling)
    seed: int = 1
    tuples: int | None = None
    sync: str = "merge"  # "merge" (snapshot/merge every dsync), "protocol" (router.sync SYNC/GLOBAL), "never"
    raw_keys: str = "shared"  # "shared" (tuples dealt round-robin), "partitioned" (each key to one router)
    batches: tuple[int, int] | None = BATCH_SIZES  # router batch sizes (random, per source); None: the workload's

    def labels(self) -> tuple[str, ...]:
        """The partitioner labels to run (all registered ones when none are given)."""
        return self.partitioners or tuple(available())


@dataclass
class PartitionerRun:
    """One partitioner's outcome: the combined assignment and its metrics, or the error."""

    label: str
    name: str
    params: dict[str, Any]
    error: str | None = None
    assignment: npt.NDArray[np.int32] | None = None
    seconds: float = 0.0
    sync_seconds: float = 0.0
    windows: WindowMetrics | None = None
    summary: dict[str, float] = field(default_factory=dict)
    sync_stats: dict[str, Any] = field(default_factory=dict)  # sync="protocol": control traffic, rounds

    @property
    def ok(self) -> bool:
        """Whether the partitioner ran to the end."""
        return self.error is None


@dataclass
class BenchResult:
    """Everything a report needs: the stream and each partitioner's run.

    ``codes`` are dense key codes per tuple (0..K-1, for per-key analyses), ``window_of`` the dense index
    of each tuple's metric window (tumbling, ``floor(t / metric_window)``), ``window_starts`` their starts.
    """

    workload: str
    spec: BenchSpec
    codes: I64
    times: I64
    window_of: I64
    window_starts: npt.NDArray[np.float64]
    metric_window: float
    runs: list[PartitionerRun]

    @property
    def tuples(self) -> int:
        """Number of tuples in the run."""
        return int(self.codes.shape[0])

    def run(self, label: str) -> PartitionerRun:
        """The run of partitioner ``label``."""
        for r in self.runs:
            if r.label == label:
                return r
        raise KeyError(label)


def sync_routers(routers: Sequence[Partitioner]) -> None:
    """In-process cooperative learning: every router merges the snapshots of all its peers.

    The stand-in for the Dalton sync protocol: snapshots are taken first, so the order of merging does
    not matter.
    """
    states = [r.snapshot() for r in routers]
    for i, r in enumerate(routers):
        r.merge([s for j, s in enumerate(states) if j != i])


def _has_merge(p: Partitioner) -> bool:
    return type(p).merge is not Partitioner.merge


def key_owner(keys: np.ndarray, routers: int) -> npt.NDArray[np.intp]:
    """Per tuple, the router of its key among ``routers``: a hash of the key's text (the same in every batch)."""
    if routers <= 1:
        return np.zeros(len(keys), dtype=np.intp)
    uniq, inverse = np.unique(np.asarray(keys), return_inverse=True)
    owner = np.fromiter((mmh3.hash(str(k), signed=False) % routers for k in uniq.tolist()), np.intp, uniq.shape[0])
    return owner[inverse.reshape(-1)]


def _router_groups(routers: int, sources: int) -> list[list[int]]:
    """Routers reading each source: router ``r`` reads source ``r % sources`` (or ``r`` the extra ones)."""
    if routers >= sources:
        return [[r for r in range(routers) if r % sources == i] for i in range(sources)]
    return [[i % routers] for i in range(sources)]


class _Lane:
    """One partitioner's P routers and its accumulated output."""

    def __init__(self, label: str, spec: BenchSpec) -> None:
        name, params = parse_spec(label)
        self.run = PartitionerRun(label, name, params)
        self.routers: list[Partitioner] = []
        self.parts: list[npt.NDArray[np.int32]] = []
        made = dict(params)
        if name == "dalton" and spec.routers > 1:  # what a deployment of P router workers sets
            made = {"routers": spec.routers, "raw_keys": spec.raw_keys, **made}
        try:
            self.routers = [
                create(name, spec.n, window=spec.window, slide=spec.slide, seed=spec.seed + r, **made)
                for r in range(spec.routers)
            ]
        except Exception as exc:  # noqa: BLE001 - any failure is reported as "n/a" with the reason
            self.fail(exc)
        self.mode = spec.sync
        self.bus = _sync_bus(self.routers, spec)

    def fail(self, exc: BaseException) -> None:
        text = " ".join(line.strip() for line in f"{type(exc).__name__}: {exc}".splitlines())
        self.run.error = text[:300]
        self.routers, self.parts = [], []

    def assign(self, keys: np.ndarray, times: I64, chunks: list[tuple[int, npt.NDArray[np.intp]]]) -> None:
        if self.run.error:
            return
        out = np.empty(len(keys), dtype=np.int32)
        try:
            for r, idx in chunks:
                t0 = time.perf_counter()
                got = self.routers[r].assign(keys[idx], times[idx])
                self.run.seconds += time.perf_counter() - t0
                got = np.asarray(got)
                if got.shape != idx.shape or (got.size and (got.min() < 0 or got.max() >= self.routers[r].n)):
                    raise ValueError(f"assign returned {got.shape} ids outside [0, n) or of the wrong size")
                out[idx] = got
        except Exception as exc:  # noqa: BLE001
            self.fail(exc)
            return
        self.parts.append(out)
        if self.bus is not None:  # the protocol syncs on its own DSYNC grid, between batches
            t0 = time.perf_counter()
            self.bus.tick(float(times[-1]) + 1)
            self.run.sync_seconds += time.perf_counter() - t0

    def sync(self) -> None:
        if self.mode != "merge" or self.run.error or len(self.routers) < 2 or not _has_merge(self.routers[0]):
            return
        t0 = time.perf_counter()
        try:
            sync_routers(self.routers)
        except Exception as exc:  # noqa: BLE001
            self.fail(exc)
        self.run.sync_seconds += time.perf_counter() - t0


def _sync_bus(routers: Sequence[Partitioner], spec: BenchSpec) -> Any:
    """Dalton routers with ``sync="protocol"``: router.sync's in-process transport (no broker)."""
    if spec.sync not in ("merge", "protocol", "never"):
        raise ValueError(f"sync must be merge, protocol or never, got {spec.sync!r}")
    syncable = [r for r in routers if isinstance(r, SyncablePartitioner)]
    if spec.sync != "protocol" or not routers or len(syncable) < len(routers):
        return None
    from router.choose.inprocess import SyncOptions, make_bus

    return make_bus(syncable, SyncOptions(dsync=spec.dsync))


def _recut(
    batches: Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]], sizes: tuple[int, int] | None, seed: int
) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """The same tuples, per source in the same order, in router batches of random sizes in ``sizes``."""
    if sizes is None:
        yield from batches
        return
    rng = np.random.default_rng(seed)
    held: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    size: dict[int, int] = {}
    want: dict[int, int] = {}
    for src, (keys, times) in batches:
        held.setdefault(src, []).append((np.asarray(keys), np.asarray(times)))
        size[src] = size.get(src, 0) + len(keys)
        if src not in want:
            want[src] = int(rng.integers(sizes[0], sizes[1]))
        while size[src] >= want[src]:
            k = np.concatenate([b[0] for b in held[src]])
            t = np.concatenate([b[1] for b in held[src]])
            w = want[src]
            yield src, (k[:w], t[:w])
            held[src] = [(k[w:], t[w:])]
            size[src] -= w
            want[src] = int(rng.integers(sizes[0], sizes[1]))
    for src, parts in held.items():
        if size[src]:
            yield src, (np.concatenate([b[0] for b in parts]), np.concatenate([b[1] for b in parts]))


def _codes(keys: list[np.ndarray]) -> tuple[np.ndarray, I64]:
    """All keys of the run, concatenated, and a dense code per tuple (for per-key analyses)."""
    if not keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    everything = np.concatenate(keys)
    _, inverse = np.unique(everything, return_inverse=True)
    return everything, inverse.reshape(-1).astype(np.int64)


def run_bench(
    workload: Workload,
    spec: BenchSpec,
    progress: Callable[[int], None] | None = None,
) -> BenchResult:
    """Run every partitioner of ``spec`` over ``workload`` (up to ``spec.tuples`` tuples)."""
    if spec.raw_keys not in ("shared", "partitioned"):
        raise ValueError(f"raw_keys must be shared or partitioned, got {spec.raw_keys!r}")
    lanes = [_Lane(label, spec) for label in spec.labels()]
    groups = _router_groups(spec.routers, max(1, len(workload.sources)))
    keys_seen: list[np.ndarray] = []
    times_seen: list[I64] = []
    fed, since_sync, limit = 0, 0, spec.tuples
    offsets = [0] * len(groups)  # per source: tuples dealt so far (round-robin position)
    for lane in lanes:  # cooperating routers know each other before the first tuple
        lane.sync()
    for src, (keys, times) in _recut(tagged_batches(workload), spec.batches, 11):
        if limit is not None and fed >= limit:
            break
        if limit is not None and fed + len(keys) > limit:
            keys, times = keys[: limit - fed], times[: limit - fed]
        group = groups[src]
        if spec.raw_keys == "partitioned":
            slot = key_owner(keys, len(group))
        else:
            slot = (np.arange(len(keys)) + offsets[src]) % len(group)
        offsets[src] += len(keys)
        chunks = [(group[g], np.flatnonzero(slot == g)) for g in range(len(group))]
        chunks = [(r, idx) for r, idx in chunks if idx.size]
        times = np.asarray(times, dtype=np.int64)
        for lane in lanes:
            lane.assign(keys, times, chunks)
        keys_seen.append(keys)
        times_seen.append(times)
        fed += len(keys)
        since_sync += len(keys)
        if since_sync >= spec.dsync:
            since_sync = 0
            for lane in lanes:
                lane.sync()
        if progress is not None:
            progress(len(keys))
    all_keys, codes = _codes(keys_seen)
    all_times = np.concatenate(times_seen) if times_seen else np.zeros(0, dtype=np.int64)
    mw = float(spec.metric_window or spec.slide)
    widx = np.floor_divide(all_times, mw).astype(np.int64)
    wins, window_of = np.unique(widx, return_inverse=True)
    window_of = window_of.reshape(-1).astype(np.int64)
    starts = (wins * mw).astype(np.float64)
    result = BenchResult(workload.name, spec, codes, all_times, window_of, starts, mw, [lane.run for lane in lanes])
    for lane in lanes:
        if lane.run.error is None:
            lane.run.assignment = np.concatenate(lane.parts) if lane.parts else np.zeros(0, np.int32)
            lane.run.windows = window_metrics(all_keys, lane.run.assignment, widx, mw, spec.n, spec.m, spec.c)
            lane.run.summary = summarise(lane.run.windows)
            lane.run.summary["tuples_per_s"] = fed / lane.run.seconds if lane.run.seconds > 0 else 0.0
            if lane.bus is not None:
                lane.run.sync_stats = lane.bus.summary()
    return result
