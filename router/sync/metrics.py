"""Sync health as Prometheus metrics of the worker (a collector over its sync transport and nodes).

Registered in the worker's :class:`~router.observability.RouterMetrics` registry by
:mod:`router.sync.service`; read at every scrape (nothing on the hot path). Per Dalton route: the age of
the last applied GLOBAL, the size of the last round, the SYNCs pending, live members, rewards buffered
in AWAIT, and the counters of the hardening (ignored messages by reason, AWAIT timeouts, reducers
deposed, Q rows cut); per worker: the transport's state, errors and restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from router.sync.kafka import KafkaSyncTransport, wall_ms

__all__ = ["SyncCollector", "register_sync_metrics"]

_GAUGES = {
    "last_global_age_ms": ("skewroute_sync_last_global_age_seconds", "age of the last applied GLOBAL (s)", 1e-3),
    "round_size": ("skewroute_sync_round_size", "members of the last applied GLOBAL", 1.0),
    "pending": ("skewroute_sync_pending", "SYNC messages held by this node's reducer state", 1.0),
    "members": ("skewroute_sync_members", "live members of the route's sync group", 1.0),
    "buffered": ("skewroute_sync_buffered_rewards", "rewards buffered in AWAIT by the partitioner", 1.0),
}
_COUNTERS = {
    "await_timeouts": ("skewroute_sync_await_timeouts", "times the partitioner left AWAIT without a GLOBAL"),
    "deposed": ("skewroute_sync_reducers_deposed", "reducers deposed for holding a round without a GLOBAL"),
    "rows_cut": ("skewroute_sync_rows_cut", "Q rows left out of outgoing sync messages (size or row cap)"),
}


class SyncCollector(Collector):
    """Reads ``transport()`` (``None`` until the sync has started) at every scrape."""

    def __init__(self, transport: Callable[[], KafkaSyncTransport | None], clock: Callable[[], float] = wall_ms):
        self.transport, self.clock = transport, clock

    def describe(self) -> list[Any]:
        """No fixed description (the routes are known only once the sync runs)."""
        return []

    def collect(self) -> Iterator[Any]:
        """The families (empty until the transport exists)."""
        t = self.transport()
        up = GaugeMetricFamily("skewroute_sync_transport_up", "1 while the sync transport's thread and clients run")
        errors = CounterMetricFamily("skewroute_sync_transport_errors", "produce, delivery and read errors")
        restarts = CounterMetricFamily("skewroute_sync_transport_restarts", "sync transport restarts after a failure")
        up.add_metric([], float(t is not None and t.healthy))
        errors.add_metric([], float(t.errors if t else 0))
        restarts.add_metric([], float(t.restarts if t else 0))
        yield from (up, errors, restarts)
        if t is None:
            return
        now = self.clock()
        gauges = {k: GaugeMetricFamily(name, doc, labels=["route"]) for k, (name, doc, _) in _GAUGES.items()}
        counters = {k: CounterMetricFamily(name, doc, labels=["route"]) for k, (name, doc) in _COUNTERS.items()}
        ignored = CounterMetricFamily(
            "skewroute_sync_ignored", "control messages ignored, by reason", labels=["route", "reason"]
        )
        for route, node in t.nodes.items():
            health = node.health(now)
            for key, (_, _, scale) in _GAUGES.items():
                value = health[key]
                if value is not None:
                    gauges[key].add_metric([route], float(value) * scale)
            for key in _COUNTERS:
                counters[key].add_metric([route], float(health[key] or 0))
            for reason, count in node.stats.ignored.items():
                ignored.add_metric([route, reason], float(count))
        yield from gauges.values()
        yield from counters.values()
        yield ignored


def register_sync_metrics(registry: CollectorRegistry, transport: Callable[[], KafkaSyncTransport | None]) -> None:
    """Add the sync health collector to a worker's registry."""
    registry.register(SyncCollector(transport))
