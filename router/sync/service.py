"""Cooperative Dalton inside a router worker: one sync node per syncable route, one Kafka transport.

:func:`start_sync` does the work (usable without Faust): for every data plane whose partitioner is a
:class:`~router.sync.port.SyncablePartitioner` (Dalton) it creates a :class:`~router.sync.node.SyncNode`
whose port reaches the partitioner only through the plane's ``submit`` (so the partitioner is touched on the
data-plane thread, between batches), makes sure the control topic exists (one partition), and starts a
:class:`~router.sync.kafka.KafkaSyncTransport` thread; the transport holds the nodes by route
(``transport.nodes``). :func:`attach_sync` adds a mode Service doing that to the Faust app once the data planes exist,
and on shutdown sends each route's ``leaving`` SYNC so the other workers do not wait for this one.

Routing never waits for the sync: if the partitioner cannot be reached within ``timeout_s`` a sync is
skipped, and if the transport fails, the routers keep routing (hash + local learning).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import faust
from mode import Service

from connectors.admin import TopicSpec, ensure_topics
from connectors.broker_traits import resolve_fetch_wait
from connectors.kafka import make_admin
from router.observability import RouterMetrics
from router.partitioners.base import Partitioner
from router.sync.kafka import KAFKA_FETCH_WAIT_MS, TANSU_FETCH_WAIT_MS, KafkaSyncTransport
from router.sync.metrics import register_sync_metrics
from router.sync.node import NodeConfig, SyncNode
from router.sync.port import DirectPort, SyncablePartitioner, as_syncable
from router.sync.reducer import DsyncPolicy
from schemas.control import params_fingerprint
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings, SkewrouteSettings

__all__ = ["PlanePort", "SyncRuntime", "SyncablePlane", "attach_sync", "start_sync"]

log = logging.getLogger("router.sync")
#: A member is dead after max(LIVENESS_FLOOR_MS, 3 * DSYNC) without a SYNC.
LIVENESS_FLOOR_MS = 2_000


class SyncablePlane(Protocol):
    """What the sync runtime uses of a route's data plane (:class:`~router.dataplane.RouteDataPlane` is one)."""

    @property
    def route(self) -> RouteSettings:
        """The route's settings (its window kind decides whether DSYNC and the slide share a unit)."""
        ...

    @property
    def partitioner(self) -> Partitioner:
        """The route's partitioner: touched only through :meth:`submit`, except for read-only gauges."""
        ...

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn`` on the plane's thread between two batches; the future holds its result."""
        ...


class SyncRuntime(Protocol):
    """What the sync service uses of a router worker's runtime (:class:`router.app.RouterRuntime` is one)."""

    @property
    def settings(self) -> SkewrouteSettings:
        """The worker's settings."""
        ...

    @property
    def instance_id(self) -> str:
        """The worker's id in the sync group."""
        ...

    @property
    def planes(self) -> Mapping[str, SyncablePlane]:
        """The data planes by route name (filled in once the data-plane service has started them)."""
        ...

    @property
    def metrics(self) -> RouterMetrics:
        """The worker's metrics; the sync collector registers in ``metrics.registry``."""
        ...


class PlanePort:
    """Reaches a data plane's syncable partitioner on the plane's thread (``plane.submit``)."""

    def __init__(self, plane: SyncablePlane, timeout_s: float = 5.0) -> None:
        partitioner = as_syncable(plane.partitioner)
        self.plane = plane
        self.partitioner = partitioner  # read-only from other threads (the buffered-rewards gauge)
        self.timeout_s = timeout_s
        comparable = plane.route.window.kind == "time"  # event ms vs DSYNC ms (live streams)
        self.direct = DirectPort(partitioner, slide_comparable=comparable, window_per_clock=1.0 if comparable else None)
        self._refresh: concurrent.futures.Future[Any] | None = None

    def payload(self) -> dict[str, Any] | None:
        """``sync_payload()`` on the data-plane thread; ``None`` if it does not answer in time."""
        fut = self.plane.submit(self.direct.payload)
        try:
            return dict(fut.result(self.timeout_s))
        except concurrent.futures.TimeoutError:
            fut.cancel()  # not started: the partitioner stays in its state
            return None

    def apply(self, message: dict[str, Any], dsync: float, members: int = 2, period: float = 0.0) -> None:
        """``apply_global`` on the data-plane thread (queued; the transport does not wait)."""
        fut = self.plane.submit(lambda: self.direct.apply(message, dsync, members, period))
        fut.add_done_callback(_log_failure)

    def abandon(self) -> None:
        """``leave_await()`` on the data-plane thread (queued)."""
        fut = self.plane.submit(self.direct.abandon)
        fut.add_done_callback(_log_failure)

    def refresh(self) -> None:
        """Keep ``L = GL`` across statistics windows (one call queued at a time)."""
        if self._refresh is None or self._refresh.done():
            self._refresh = self.plane.submit(self.direct.refresh)

    def buffered(self) -> int:
        """Rewards buffered in AWAIT (read from the transport's thread: a gauge, may be stale)."""
        return self.direct.buffered()


def _log_failure(fut: concurrent.futures.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("applying a GLOBAL message failed: %s", fut.exception())


def fingerprint(partitioner: SyncablePartitioner) -> str:
    """Digest of the parameters routers of one route must share to average Q rows (the seed may differ)."""
    params = {k: v for k, v in partitioner.params().items() if k != "seed"}
    return params_fingerprint({"name": partitioner.name, "n": int(partitioner.n), **params})


def start_sync(
    kafka: KafkaSettings, router: RouterSettings, instance: str, planes: Mapping[str, SyncablePlane]
) -> KafkaSyncTransport | None:
    """Start syncing every route of ``planes`` whose partitioner is syncable (``None`` when there is none).

    The returned transport holds one node per synced route (``transport.nodes[route]``).
    """
    nodes = []
    start = time.time() * 1000
    for name, plane in planes.items():
        partitioner = plane.partitioner
        if not isinstance(partitioner, SyncablePartitioner):
            continue
        node = SyncNode(
            PlanePort(plane),
            NodeConfig(
                deployment=router.app_id,
                route=name,
                instance=instance,
                combiners=int(partitioner.n),
                dsync=router.dsync_ms,
                policy=DsyncPolicy.around(router.dsync_ms),
                liveness_floor=LIVENESS_FLOOR_MS,
                stale_before=start - 2 * router.dsync_ms,  # history is judged by the senders' clocks: skew margin
                measure_compute=True,
                fingerprint=fingerprint(partitioner),
                max_bytes=router.control_max_bytes,
            ),
        )
        nodes.append(node)
    if not nodes:
        return None
    ensure_topics(make_admin(kafka), [TopicSpec(router.control_topic, 1)])
    log.info("dalton sync: routes %s on %s as %s", [n.config.route for n in nodes], router.control_topic, instance)
    wait_ms, why = resolve_fetch_wait(
        router.control_fetch_wait_ms, kafka, quick_ms=TANSU_FETCH_WAIT_MS, usual_ms=KAFKA_FETCH_WAIT_MS
    )
    log.info("dalton sync: control reader fetch.wait.max.ms %d (%s)", wait_ms, why)
    return KafkaSyncTransport(
        kafka, router.control_topic, nodes, fetch_wait_ms=wait_ms, max_bytes=router.control_max_bytes
    ).start()


class DaltonSyncService(Service):
    """Starts :func:`start_sync` once the worker's data planes exist; leaves cleanly on stop."""

    def __init__(self, runtime: SyncRuntime, **kwargs: Any) -> None:
        self.runtime = runtime
        self.transport: KafkaSyncTransport | None = None
        register_sync_metrics(runtime.metrics.registry, lambda: self.transport)
        super().__init__(**kwargs)

    async def on_start(self) -> None:
        """Attach in the background (the data planes are created by another service)."""
        self.add_future(self._attach())

    async def _attach(self) -> None:
        rt = self.runtime
        wanted = {r.route_name for r in rt.settings.routes}
        while not self.should_stop and not wanted <= set(rt.planes):
            await asyncio.sleep(0.1)
        if self.should_stop:
            return
        loop = asyncio.get_running_loop()
        s = rt.settings
        self.transport = await loop.run_in_executor(None, start_sync, s.kafka, s.router, rt.instance_id, rt.planes)

    async def on_stop(self) -> None:
        """Send the ``leaving`` SYNCs and close the transport."""
        if self.transport is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.transport.stop)


def attach_sync(app: faust.App, runtime: SyncRuntime) -> None:
    """Add the Dalton sync service to a router worker's Faust app."""

    class RouterDaltonSync(DaltonSyncService):  # Faust instantiates services itself, with loop/beacon only
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(runtime, **kwargs)

    app.service(RouterDaltonSync)
