"""Health of one data plane: readiness, the age of the last commit, per-partition consumer and event-time lag.

The data-plane thread calls :meth:`PlaneHealth.looped` after every ``consume()``, :meth:`PlaneHealth.observe`
with every extracted batch and :meth:`PlaneHealth.committed` after every commit; :meth:`PlaneHealth.sample`
(at most once per ``sample_s``) reads the high watermarks librdkafka cached from its fetches and the consumer's
positions, so it costs no broker round trip. Other threads read :meth:`PlaneHealth.ready` and
:meth:`PlaneHealth.snapshot` (plain attribute reads: a slightly stale answer is fine for a probe).

Ready means: the loop thread is alive, the consumer joined its group (it got an assignment, possibly an empty
one), ``consume()`` returned within ``stale_s``, and no batch has waited for its commit for ``stale_s`` or more.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import TopicPartition

from router.extract import Extracted
from router.observability import RouteMetrics

__all__ = ["PlaneHealth"]

_OFFSET_INVALID = -1001


class PlaneHealth:
    """Readiness facts and lags of one route's data plane (written by its thread, read by anyone)."""

    def __init__(self, metrics: RouteMetrics, raw_topic: str, stale_s: float, sample_s: float = 1.0) -> None:
        self.metrics, self.raw_topic, self.stale_s, self.sample_s = metrics, raw_topic, stale_s, sample_s
        self.joined = False
        self.last_loop: float | None = None  # monotonic: consume() returned
        self.last_commit: float | None = None  # wall clock (time.time()) of the last successful commit
        self.waiting_since: float | None = None  # monotonic: consume time of the oldest uncommitted batch
        self.lag: dict[int, int] = {}  # raw partition -> records behind the high watermark
        self.event_ms: dict[int, int] = {}  # raw partition -> event time of its latest record
        self._next_sample = 0.0
        metrics.last_commit_age.set_function(self.commit_age)

    def commit_age(self) -> float:
        """Seconds since the last successful commit (``-1`` before the first)."""
        return -1.0 if self.last_commit is None else time.time() - self.last_commit

    def looped(self) -> None:
        """``consume()`` returned."""
        self.last_loop = time.monotonic()

    def observe(self, ext: Extracted) -> None:
        """Note the latest event time per raw partition of a batch."""
        if ext.keys:
            self.event_ms.update(zip(ext.partitions, ext.times, strict=True))  # the last record of each partition

    def committed(self) -> None:
        """Offsets were committed."""
        self.last_commit = time.time()
        self.metrics.last_commit.set(self.last_commit)

    def revoked(self, partitions: set[int]) -> None:
        """Forget the lags of partitions this worker no longer owns."""
        for p in partitions:
            self.lag.pop(p, None)
            self.event_ms.pop(p, None)
            self.metrics.forget_partition(p)

    def sample(self, consumer: Any, assignment: set[int]) -> None:
        """Refresh the lag gauges (at most once per ``sample_s``)."""
        now = time.monotonic()
        if now < self._next_sample or not assignment:
            return
        self._next_sample = now + self.sample_s
        tps = [TopicPartition(self.raw_topic, p) for p in sorted(assignment)]
        try:
            positions = consumer.position(tps)
        except Exception:  # a probe: never let it stop the loop
            return
        wall_ms = time.time() * 1000
        for tp in positions:
            try:
                _, high = consumer.get_watermark_offsets(tp, cached=True)
            except Exception:
                continue
            if high < 0 or tp.offset == _OFFSET_INVALID:
                continue
            lag = max(0, high - tp.offset)
            self.lag[tp.partition] = lag
            self.metrics.partition_lag(tp.partition, lag)
        for p, t in list(self.event_ms.items()):
            self.metrics.partition_event_lag(p, (wall_ms - t) / 1000.0)

    def ready(self, alive: bool) -> tuple[bool, str]:
        """Whether the route is ready, and why not."""
        now = time.monotonic()
        if not alive:
            return False, "the data-plane thread is not running"
        if not self.joined:
            return False, "not yet in its consumer group"
        if self.last_loop is None or now - self.last_loop > self.stale_s:
            return False, f"no consume() for more than {self.stale_s:g} s"
        if self.waiting_since is not None and now - self.waiting_since > self.stale_s:
            return False, f"a batch has waited for its commit for more than {self.stale_s:g} s"
        return True, "ok"

    def snapshot(self) -> dict[str, Any]:
        """JSON-able lags and commit age (for ``/routes`` and ``skewroute status``)."""
        return {
            "lag": {str(p): n for p, n in sorted(self.lag.items())},
            "lag_total": sum(self.lag.values()),
            "event_time_ms": {str(p): t for p, t in sorted(self.event_ms.items())},
            "last_commit_age_s": round(self.commit_age(), 3),
        }
