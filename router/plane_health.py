"""Health of one data plane: readiness, the age of the last commit, per-partition consumer and event-time lag.

The data-plane thread calls :meth:`PlaneHealth.looped` after every ``consume()``, :meth:`PlaneHealth.observe`
with every extracted batch and :meth:`PlaneHealth.committed` after every commit; :meth:`PlaneHealth.sample`
(at most once per ``sample_s``) reads the high watermarks librdkafka cached from its fetches and the consumer's
positions, so it costs no broker round trip. Other threads read :meth:`PlaneHealth.ready` and
:meth:`PlaneHealth.snapshot` (plain attribute reads: a slightly stale answer is fine for a probe).

Event-time spread: the newest event time routed from any owned partition minus the latest routed from the
partitions that still have records waiting. The records still to come from those partitions land in the combiner
partitions after newer ones, that far behind in event time. Spark drops a record whose window ended more than
its watermark delay before the newest event time it has read, so a spread above ``spread_warn_ms`` (the route's
Spark watermark delay) is logged as a warning, at most once a minute: the way to avoid it is ``router.align_ms``.
It sees one worker's partitions; several workers catching up at different paces add their own spread (aligned
by ``router.align_peers``).

Ready means: the loop thread is alive, the consumer joined its group (it got an assignment, possibly an empty
one), ``consume()`` returned within ``stale_s``, and no batch has waited for its commit for ``stale_s`` or more.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import TopicPartition

from router.extract import Extracted
from router.observability import RouteMetrics

__all__ = ["PlaneHealth"]

log = logging.getLogger(__name__)

_OFFSET_INVALID = -1001
#: seconds between two warnings of a large event-time spread
SPREAD_WARN_EVERY_S = 60.0


class PlaneHealth:
    """Readiness facts and lags of one route's data plane (written by its thread, read by anyone)."""

    def __init__(
        self,
        metrics: RouteMetrics,
        raw_topic: str,
        stale_s: float,
        sample_s: float = 1.0,
        *,
        spread_warn_ms: int | None = None,
    ) -> None:
        self.metrics, self.raw_topic, self.stale_s, self.sample_s = metrics, raw_topic, stale_s, sample_s
        self.spread_warn_ms = spread_warn_ms
        self._next_warn = 0.0
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
        self._spread(now)

    def spread_ms(self) -> int:
        """Newest event time routed minus the latest of the partitions with records waiting (0: none waiting)."""
        waiting = [t for p, t in self.event_ms.items() if self.lag.get(p, 0) > 0]
        return max(self.event_ms.values()) - min(waiting) if waiting else 0

    def _spread(self, now: float) -> None:
        spread = self.spread_ms()
        self.metrics.event_spread.set(spread / 1000.0)
        limit = self.spread_warn_ms
        if limit is None or spread <= limit or now < self._next_warn:
            return
        self._next_warn = now + SPREAD_WARN_EVERY_S
        newest = max(self.event_ms.values())
        behind = sorted(p for p, t in self.event_ms.items() if self.lag.get(p, 0) > 0 and newest - t > limit)
        log.warning(
            "route %s: raw partitions %s of %s are %.1f s behind the newest event time routed, with records "
            "waiting: Spark drops those whose window ends more than its watermark delay (%.1f s) before the newest "
            "event time it has read. Set router.align_ms (e.g. half the watermark delay) to route the partitions in "
            "step (deploy/OPERATIONS.md, late records)",
            self.metrics.route, behind, self.raw_topic, spread / 1000.0, limit / 1000.0,
        )  # fmt: skip

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
            "event_time_spread_s": round(self.spread_ms() / 1000.0, 3),
            "last_commit_age_s": round(self.commit_age(), 3),
        }
