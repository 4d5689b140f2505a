"""The router worker as a Faust app: lifecycle, signals, web endpoints; the data plane runs beside it.

``create_app(settings)`` builds the app; the module-level ``app`` (created on first access, from the
environment / ``$SKEWROUTE_CONFIG``) lets ``faust -A router.app worker`` run the same worker as
``skewroute router``.

Faust runs the control side (its event loop, the web server with ``/metrics``, ``/routes`` and ``/ready``, agents for
control topics such as the Dalton sync added later); the records never pass through it: one
:class:`~router.dataplane.RouteDataPlane` thread per route moves them in batches with confluent-kafka.
:class:`DataPlaneService` starts those threads with the app, stops the worker if one fails, and on SIGTERM or
SIGINT (Faust's worker handles both) lets each finish its batch, deliver, commit, and leave its group.

Consumer groups: Faust's own consumer uses the group ``app_id`` (Faust's assignor protocol); each route's
data plane uses ``<app_id>.<route>`` (librdkafka's), so the two protocols never meet in one group.
Sync services find a route's runtime with ``app.skewroute.planes[route_name]`` (``.partitioner``,
``.submit(fn)`` to touch it safely; see :class:`router.sync.service.SyncablePlane`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

import faust
import orjson
from mode import Service

from connectors.admin import ensure_route_topics
from connectors.broker_traits import resolve_static_membership
from router.dataplane import RouteDataPlane
from router.identity import WorkerSlot, claim_slot, free_web_port
from router.observability import CONTENT_TYPE_LATEST, RouterMetrics, setup_logging
from router.plane_parts import tune_gc
from router.preflight import raw_topic_fix, require_topics
from router.sync.service import attach_sync
from schemas.settings import KafkaSettings, SkewrouteSettings
from schemas.spark_settings import interval_ms

__all__ = ["DataPlaneService", "RouterRuntime", "create_app"]

log = logging.getLogger("router.app")


@dataclass
class RouterRuntime:
    """What a worker holds besides the Faust app: settings, metrics, and one data plane per route."""

    settings: SkewrouteSettings
    instance_id: str
    metrics: RouterMetrics
    planes: dict[str, RouteDataPlane] = field(default_factory=dict)
    slot: WorkerSlot | None = None  # this worker's slot on the host, when its id or port derive from it

    def status(self) -> dict[str, Any]:
        """JSON-able state of every route (``/routes``)."""
        return {
            "instance": self.instance_id,
            "routes": {
                name: {
                    "raw_topic": p.route.raw_topic,
                    "combiner_topic": p.route.combiner_topic_name,
                    "partitioner": p.partitioner_name,
                    "group": p.group_id,
                    "assigned": sorted(p.assignment),
                    "consumed": p.stats.consumed,
                    "routed": p.stats.routed,
                    "dead_lettered": p.stats.dead,
                    "alive": p.alive,
                    "ready": p.health.ready(p.alive)[0],
                    **p.health.snapshot(),
                }
                for name, p in self.planes.items()
            },
        }

    def ready(self) -> tuple[bool, dict[str, str]]:
        """Whether every route is ready (``/ready``), and each route's reason."""
        why = {name: p.health.ready(p.alive)[1] for name, p in self.planes.items()}
        return bool(why) and all(w == "ok" for w in why.values()), why


class DataPlaneService(Service):
    """Starts a data-plane thread per route with the app; stops them (deliver, commit, leave) with it."""

    def __init__(self, runtime: RouterRuntime, **kwargs: Any) -> None:
        self.runtime = runtime
        super().__init__(**kwargs)

    async def on_start(self) -> None:
        """Create the route topics and data planes, tune the GC, then start every route's loop."""
        rt, s = self.runtime, self.runtime.settings
        loop = asyncio.get_running_loop()
        static, why = await loop.run_in_executor(
            None, resolve_static_membership, s.router.static_membership, s.router.instance_id, s.kafka
        )
        log.info("static group membership %s (%s)", f"on as {s.router.instance_id}" if static else "off", why)
        router = s.router.model_copy(update={"static_membership": static})
        planes = []
        for route in s.routes:
            # never create a route's topics for a raw topic that is not there (MissingTopicError stops the worker)
            await loop.run_in_executor(None, require_topics, s.kafka, {route.raw_topic: raw_topic_fix(route)})
            await loop.run_in_executor(None, ensure_route_topics, s.kafka, route)
            planes.append(
                RouteDataPlane(
                    s.kafka, router, route, rt.metrics, instance_id=rt.instance_id,
                    watermark_ms=interval_ms(s.spark.watermark),
                )
            )  # fmt: skip
        tune_gc()  # start-up is over (partitioners built, kernels loaded): from here one tracked Message per record
        for plane in planes:
            rt.planes[plane.route.route_name] = plane.start()
        self.add_future(self._supervise())

    async def _supervise(self) -> None:
        """Crash the worker (so it restarts and replays from the committed offsets) if a data plane fails."""
        while not self.should_stop:
            for plane in self.runtime.planes.values():
                if plane.error is not None:
                    await self.crash(plane.error)
                    return
            await asyncio.sleep(0.5)

    async def on_stop(self) -> None:
        """Let every loop finish its batch, commit and close its clients."""
        planes = list(self.runtime.planes.values())
        for p in planes:
            p.stop()
        timeout = self.runtime.settings.router.shutdown_timeout_s + 5
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, p.join, timeout) for p in planes))


def _faust_broker(kafka: KafkaSettings) -> dict[str, Any]:
    """Faust's broker URL and credentials from the same settings the data plane uses."""
    urls = ";".join(f"kafka://{h.strip()}" for h in kafka.bootstrap_servers.split(","))
    opts: dict[str, Any] = {"broker": urls}
    ctx = None
    if kafka.security_protocol in ("SSL", "SASL_SSL"):
        ctx = ssl.create_default_context(cafile=kafka.ssl_ca_location)
        if kafka.ssl_certificate_location:
            pw = kafka.ssl_key_password.get_secret_value() if kafka.ssl_key_password else None
            ctx.load_cert_chain(kafka.ssl_certificate_location, kafka.ssl_key_location, pw)
    if kafka.security_protocol.startswith("SASL_"):
        assert kafka.sasl_username is not None and kafka.sasl_password is not None  # checked by the settings
        opts["broker_credentials"] = faust.SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.sasl_password.get_secret_value(),
            mechanism=kafka.sasl_mechanism,
            ssl_context=ctx,
        )
    elif ctx is not None:
        opts["broker_credentials"] = faust.SSLCredentials(ctx)
    return opts


def create_app(settings: SkewrouteSettings | None = None, *, web_port: int | None = None) -> faust.App:
    """A Faust app running the router for ``settings`` (default: :meth:`SkewrouteSettings.load`)."""
    s = settings if settings is not None else SkewrouteSettings.load()
    r = s.router
    setup_logging(r.log_format, r.log_level)
    (r.state_dir / "faust").mkdir(parents=True, exist_ok=True)
    port = web_port if web_port is not None else r.web_port
    slot = claim_slot(r.slot_dir) if r.instance_id is None or port is None else None  # held for the process's life
    instance = r.instance_id or (slot.instance_id() if slot else socket.gethostname())
    if port is None:
        port = free_web_port(r.web_host, slot.index if slot else 0)
    log.info("worker %s: web server on http://%s:%d (/metrics, /routes, /ready)", instance, r.web_host, port)
    runtime = RouterRuntime(s, instance, RouterMetrics(instance), slot=slot)
    app = faust.App(
        r.app_id,
        **_faust_broker(s.kafka),
        web_port=port,
        web_bind=r.web_host,
        web_host=r.web_host,
        web_in_thread=False,
        datadir=str(r.state_dir / "faust"),
        store="memory://",
        autodiscover=False,
        broker_session_timeout=6,  # seconds: a short session keeps group joins short (see connectors.kafka)
        broker_heartbeat_interval=1,
        topic_partitions=1,
    )
    app.skewroute = runtime  # type: ignore[attr-defined]

    class RouterDataPlane(DataPlaneService):  # Faust instantiates services itself, with loop/beacon only
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(runtime, **kwargs)

    app.service(RouterDataPlane)
    attach_sync(app, runtime)  # cooperative Dalton: one sync node per Dalton route (router.sync)

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        return web.bytes(runtime.metrics.exposition(), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/ready")
    async def ready(web: Any, request: Any) -> Any:
        ok, why = runtime.ready()
        return web.bytes(
            orjson.dumps({"ready": ok, "routes": why}), content_type="application/json", status=200 if ok else 503
        )

    @app.page("/routes")
    async def routes(web: Any, request: Any) -> Any:
        return web.bytes(orjson.dumps(runtime.status()), content_type="application/json")

    return app


app: faust.App  # created by __getattr__ on first access (importing this module reads no settings)


def __getattr__(name: str) -> Any:
    """``router.app.app``: the app for ``faust -A router.app``, built from the environment on first access."""
    if name == "app":
        global app
        app = create_app()
        return app
    raise AttributeError(name)
