"""Router metrics (prometheus-client) and structured logs.

One :class:`RouterMetrics` per worker process holds a private :class:`CollectorRegistry` (so several workers can
live in one test process); :meth:`RouterMetrics.route` hands each data plane its labelled children once, so the
hot path only calls ``inc``/``set``/``observe``. The Faust app serves :meth:`RouterMetrics.exposition` at
``/metrics``.

Window metrics follow docs/partitioners.md: per completed statistics window (the route's ``window.slide``, in tuples or
event-time ms) the per-combiner load ``L_i``, ``max/mean`` and the replication ``Γ / K``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

__all__ = ["CONTENT_TYPE_LATEST", "JsonFormatter", "RouteMetrics", "RouterMetrics", "WindowTracker", "setup_logging"]

_BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class RouterMetrics:
    """All metric families of one router worker."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self.registry = CollectorRegistry(auto_describe=True)
        r, lbl = self.registry, ["route"]
        self.tuples_in = Counter("skewroute_tuples_in", "raw records consumed", lbl, registry=r)
        self.tuples_out = Counter("skewroute_tuples_out", "routed records acknowledged by Kafka", lbl, registry=r)
        self.dead = Counter(
            "skewroute_tuples_dead_lettered",
            "records sent to the DLQ, by faulty field",
            [*lbl, "field"],
            registry=r,
        )
        self.batches = Counter("skewroute_batches", "data-plane batches completed", lbl, registry=r)
        self.batch_seconds = Histogram(
            "skewroute_batch_seconds", "batch latency: consume to commit", lbl, buckets=_BATCH_BUCKETS, registry=r
        )
        self.partitioner_seconds = Counter(
            "skewroute_partitioner_seconds", "time spent in Partitioner.assign", lbl, registry=r
        )
        self.partitioner_per_tuple = Gauge(
            "skewroute_partitioner_seconds_per_tuple", "assign time per tuple, last batch", lbl, registry=r
        )
        self.combiner_load = Gauge(
            "skewroute_combiner_load",
            "tuples per combiner, last completed window",
            [*lbl, "combiner"],
            registry=r,
        )
        self.window_imbalance = Gauge(
            "skewroute_window_imbalance_ratio", "max/mean combiner load in the last completed window", lbl, registry=r
        )
        self.window_replication = Gauge(
            "skewroute_window_replication", "replication (sum_i D_i)/K in the last completed window", lbl, registry=r
        )
        self.windows = Counter("skewroute_windows", "statistics windows completed", lbl, registry=r)
        self.assigned = Gauge("skewroute_assigned_partitions", "raw partitions this worker owns", lbl, registry=r)
        self.rebalances = Counter("skewroute_rebalances", "partition assignments and revocations", lbl, registry=r)
        self.retries = Counter("skewroute_batch_retries", "batches re-run after a delivery failure", lbl, registry=r)
        self.info = Gauge("skewroute_route_info", "route configuration", [*lbl, "partitioner", "instance"], registry=r)
        part = [*lbl, "partition"]
        self.consumer_lag = Gauge(
            "skewroute_consumer_lag", "records behind the high watermark, per owned raw partition", part, registry=r
        )
        self.event_time_lag = Gauge(
            "skewroute_event_time_lag_seconds",
            "wall clock minus the event time of the latest record, per owned raw partition",
            part,
            registry=r,
        )
        self.event_spread = Gauge(
            "skewroute_event_time_spread_seconds",
            "newest event time routed minus the latest routed of the partitions with records waiting: how far "
            "behind, in event time, the records still to come land in the combiner partitions",
            lbl,
            registry=r,
        )
        self.event_clock = Gauge(
            "skewroute_event_time_clock_ms", "the route's window clock (running max of bounded event times)", lbl,
            registry=r,
        )  # fmt: skip
        self.clamped = Counter(
            "skewroute_event_times_clamped", "records routed with their window time clamped (too far ahead)", lbl,
            registry=r,
        )  # fmt: skip
        self.last_commit = Gauge(
            "skewroute_last_commit_timestamp_seconds", "unix time of the last successful offset commit", lbl, registry=r
        )
        self.last_commit_age = Gauge(
            "skewroute_last_commit_age_seconds", "seconds since the last successful offset commit (-1: none yet)", lbl,
            registry=r,
        )  # fmt: skip
        self.commit_failures = Counter(
            "skewroute_commit_failures", "offset commits (or partitions of one) the broker refused", lbl, registry=r
        )
        self.dropped_batches = Counter(
            "skewroute_dropped_batches", "batches dropped uncommitted because their partitions were lost", lbl,
            registry=r,
        )  # fmt: skip
        self.aligned_held = Gauge(
            "skewroute_aligned_held_records", "raw records held back by router.align_ms (consumed, not routed)", lbl,
            registry=r,
        )  # fmt: skip
        self.aligned_pauses = Counter(
            "skewroute_aligned_pauses", "raw partitions paused by router.align_ms (a batch's worth held)", lbl,
            registry=r,
        )  # fmt: skip

    def route(self, name: str, partitioner: str, combiners: int) -> RouteMetrics:
        """The pre-labelled metrics of one route."""
        self.info.labels(name, partitioner, self.instance).set(combiners)
        for fld in ("value", "key", "timestamp"):
            self.dead.labels(name, fld)  # show zero series for the usual fields
        return RouteMetrics(self, name, combiners)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)


class RouteMetrics:
    """One route's metric children (labels resolved once)."""

    def __init__(self, m: RouterMetrics, route: str, combiners: int) -> None:
        self.route = route
        self._m = m
        self.tuples_in = m.tuples_in.labels(route)
        self.tuples_out = m.tuples_out.labels(route)
        self.batches = m.batches.labels(route)
        self.batch_seconds = m.batch_seconds.labels(route)
        self.partitioner_seconds = m.partitioner_seconds.labels(route)
        self.partitioner_per_tuple = m.partitioner_per_tuple.labels(route)
        self.loads = [m.combiner_load.labels(route, str(i)) for i in range(combiners)]
        self.imbalance = m.window_imbalance.labels(route)
        self.replication = m.window_replication.labels(route)
        self.windows = m.windows.labels(route)
        self.assigned = m.assigned.labels(route)
        self.rebalances = m.rebalances.labels(route)
        self.retries = m.retries.labels(route)
        self.event_clock = m.event_clock.labels(route)
        self.event_spread = m.event_spread.labels(route)
        self.clamped = m.clamped.labels(route)
        self.last_commit = m.last_commit.labels(route)
        self.last_commit_age = m.last_commit_age.labels(route)
        self.commit_failures = m.commit_failures.labels(route)
        self.dropped_batches = m.dropped_batches.labels(route)
        self.aligned_held = m.aligned_held.labels(route)
        self.aligned_pauses = m.aligned_pauses.labels(route)

    def partition_lag(self, partition: int, lag: int) -> None:
        """Set one raw partition's consumer lag."""
        self._m.consumer_lag.labels(self.route, str(partition)).set(lag)

    def partition_event_lag(self, partition: int, seconds: float) -> None:
        """Set one raw partition's event-time lag."""
        self._m.event_time_lag.labels(self.route, str(partition)).set(seconds)

    def forget_partition(self, partition: int) -> None:
        """Drop the per-partition series of a partition this worker no longer owns."""
        for g in (self._m.consumer_lag, self._m.event_time_lag):
            with contextlib.suppress(KeyError):
                g.remove(self.route, str(partition))

    def dead_lettered(self, field: str) -> None:
        """Count one dead-lettered record."""
        self._m.dead.labels(self.route, field).inc()

    def windows_done(self, done: list[WindowStats]) -> None:
        """Publish the windows a batch completed: all are counted, the gauges show the newest."""
        if not done:
            return
        last = done[-1]
        for g, v in zip(self.loads, last.loads.tolist(), strict=True):
            g.set(v)
        self.imbalance.set(last.max_over_mean)
        self.replication.set(last.replication)
        self.windows.inc(len(done))


@dataclass(frozen=True, slots=True)
class WindowStats:
    """The metrics of one completed window."""

    window: int
    loads: npt.NDArray[np.int64]
    keys: int
    pairs: int

    @property
    def max_over_mean(self) -> float:
        """``max_i L_i / mean_i L_i``."""
        mean = float(self.loads.mean()) if self.loads.size else 0.0
        return float(self.loads.max()) / mean if mean > 0 else 0.0

    @property
    def replication(self) -> float:
        """``Γ / K``: distinct (key, combiner) pairs over distinct keys."""
        return self.pairs / self.keys if self.keys else 0.0


class WindowTracker:
    """Per-combiner load and key replication over tumbling windows of ``slide`` (tuples or event-time ms).

    ``observe`` takes a batch's 64-bit key ids (the partitioner's, ``Partitioner.assign_with_ids``), combiner
    ids and window clock (non-decreasing); it returns the windows the batch completed. Distinct keys are tracked
    by id (collisions are negligible for metrics). The open window's per-batch id arrays are merged into one
    distinct array whenever they hold twice as many entries as after the last merge, so memory follows the
    distinct keys of the open window, not its records (a window held open by a far-ahead clock cannot grow
    without bound).
    """

    def __init__(self, n: int, slide: float) -> None:
        self.n = n
        self.slide = slide
        self.current: int | None = None
        self._loads = np.zeros(n, dtype=np.int64)
        self._keys: list[npt.NDArray[np.uint64]] = []
        self._pairs: list[npt.NDArray[np.uint64]] = []
        self._held = 0  # entries in _keys + _pairs
        self._compact_at = 1 << 20
        from router.window_distinct import distinct_by_window  # numba: imported by the router only, not the CLI

        self._distinct_by_window = distinct_by_window
        distinct_by_window(np.zeros(1, np.int64), np.zeros(1, np.uint64))  # compiled (or loaded) now, not mid-batch

    def observe(
        self, key_ids: npt.NDArray[np.uint64], combiners: npt.NDArray[np.int32], clock: npt.NDArray[np.int64]
    ) -> list[WindowStats]:
        """Add one batch; return the windows it completed (oldest first).

        One pass each for the distinct (window, key) and (window, key, combiner) pairs
        (:mod:`router.window_distinct`), then a short loop over the windows the batch touches.
        """
        if clock.size == 0:
            return []
        win = (clock // self.slide).astype(np.int64)
        if self.current is None:
            self.current = int(win[0])
        # dense window index (event times may jump by many windows between records)
        change = win[1:] != win[:-1]
        widx = np.zeros(win.size, dtype=np.int64)
        np.cumsum(change, out=widx[1:])
        wins = [int(win[0]), *win[1:][change].tolist()]
        kw, ku = self._distinct_by_window(widx, key_ids)
        pw, pu = self._distinct_by_window(widx, key_ids ^ (combiners.astype(np.uint64) * _GOLDEN))
        loads = np.bincount(widx * self.n + combiners, minlength=len(wins) * self.n).reshape(len(wins), self.n)
        bounds = np.arange(len(wins) + 1)
        kb, pb = np.searchsorted(kw, bounds).tolist(), np.searchsorted(pw, bounds).tolist()  # each window's slice
        done: list[WindowStats] = []
        for i, w in enumerate(wins):
            if w != self.current:
                done.append(self._close())
                self.current = w
            self._loads += loads[i]
            self._keys.append(ku[kb[i] : kb[i + 1]])
            self._pairs.append(pu[pb[i] : pb[i + 1]])
            self._held += kb[i + 1] - kb[i] + pb[i + 1] - pb[i]
        if self._held > self._compact_at:
            self._compact()
        return done

    def _compact(self) -> None:
        self._keys = [np.unique(np.concatenate(self._keys))] if self._keys else []
        self._pairs = [np.unique(np.concatenate(self._pairs))] if self._pairs else []
        self._held = sum(a.size for a in self._keys) + sum(a.size for a in self._pairs)
        self._compact_at = max(1 << 20, 2 * self._held)

    def _close(self) -> WindowStats:
        keys = _distinct(self._keys)
        pairs = _distinct(self._pairs)
        stats = WindowStats(self.current or 0, self._loads.copy(), keys, pairs)
        self._loads[:] = 0
        self._keys.clear()
        self._pairs.clear()
        self._held = 0
        self._compact_at = 1 << 20
        return stats


def _distinct(parts: list[npt.NDArray[np.uint64]]) -> int:
    """Distinct values over individually distinct arrays."""
    if not parts:
        return 0
    if len(parts) == 1:
        return int(parts[0].size)
    return int(np.unique(np.concatenate(parts)).size)


class JsonFormatter(logging.Formatter):
    """One JSON object per log line: time, level, logger, message, and every ``extra=`` field."""

    _STD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        """Format one record as JSON."""
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in vars(record).items():
            if k not in self._STD and not k.startswith("_"):
                doc[k] = v
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def setup_logging(fmt: str = "json", level: str = "INFO") -> None:
    """Route the ``router`` loggers through one handler (JSON lines or plain text) on stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    log = logging.getLogger("router")
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False
