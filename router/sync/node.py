"""One (router instance, route) in the sync protocol: client + membership + (possibly elected) reducer.

A :class:`SyncNode` is transport-agnostic: a transport calls :meth:`SyncNode.tick` regularly and
:meth:`SyncNode.receive` (or :meth:`SyncNode.receive_raw`) for every control message of the topic, in
the topic's order, *including the node's own*; it publishes whatever these return. Every node sees the
same messages, so every node has the same membership, the same pending round and the same elected
reducer (the lowest live instance id); only that one builds rounds. A dead reducer stops sending SYNCs,
the liveness timeout drops it everywhere, and the next lowest id closes the pending round.

The reducer's GLOBAL leaves ``reducer_delay`` after the round was ready (an artificial processing time
for experiments, Fig. 14b; a function of the time or a constant) plus, with ``measure_compute``, the
measured computation time (milliseconds: wall-clock transports only).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from router.sync.client import PartitionerPort, SyncClient
from router.sync.membership import Membership
from router.sync.reducer import DsyncPolicy, QtableReducer
from schemas.control import ControlMessageError, GlobalMessage, SyncMessage, parse_control

__all__ = ["NodeConfig", "NodeStats", "SyncNode"]

log = logging.getLogger("router.sync")
ControlOut = SyncMessage | GlobalMessage


@dataclass(frozen=True)
class NodeConfig:
    """Protocol parameters of one node (times in the transport's clock)."""

    deployment: str
    route: str
    instance: str
    combiners: int
    dsync: float
    policy: DsyncPolicy | None = None  # default: DsyncPolicy.around(dsync)
    liveness_factor: float = 3.0  # a member is dead after max(floor, factor * DSYNC) without a SYNC
    liveness_floor: float = 0.0
    reducer_delay: float | Callable[[float], float] = 0.0
    measure_compute: bool = False
    stale_before: float = -math.inf  # GLOBALs sent earlier are not applied (history read at start-up)


@dataclass
class NodeStats:
    """Counters and time series of one node (the convergence report reads them)."""

    syncs: int = 0
    globals_built: int = 0
    globals_applied: int = 0
    ignored: Counter[str] = field(default_factory=Counter)
    dsync: list[tuple[float, float]] = field(default_factory=list)  # (time, DSYNC) on every change
    leaders: list[tuple[float, str | None]] = field(default_factory=list)  # (time, reducer) on every change
    latencies: list[float] = field(default_factory=list)  # SYNC -> GLOBAL applied
    hot_seen: set[str] = field(default_factory=set)  # every key a GLOBAL marked globally hot
    rounds: list[tuple[float, int, str]] = field(default_factory=list)  # applied GLOBALs: (sent, round, reducer)


class SyncNode:
    """Protocol driver of one router instance for one route (see the module doc)."""

    def __init__(self, port: PartitionerPort, config: NodeConfig) -> None:
        c = config
        self.port, self.config = port, c
        self.instance = c.instance
        self.client = SyncClient(
            deployment=c.deployment,
            route=c.route,
            instance=c.instance,
            combiners=c.combiners,
            dsync=c.dsync,
            stale_before=c.stale_before,
        )
        self.reducer = QtableReducer(
            deployment=c.deployment,
            route=c.route,
            combiners=c.combiners,
            dsync=c.dsync,
            policy=c.policy or DsyncPolicy.around(c.dsync),
        )
        self.membership = Membership(c.instance, self._timeout())
        self.stats = NodeStats(dsync=[(-math.inf, float(c.dsync))])
        self._outbox: list[tuple[float, float, GlobalMessage]] = []  # (send at, ready at, message)
        self.last_global: GlobalMessage | None = None
        self.stopped = False

    # -- helpers -------------------------------------------------------------------------------
    def _timeout(self) -> float:
        c = self.config
        return max(c.liveness_floor, c.liveness_factor * max(self.client.dsync, self.reducer.dsync))

    def _delay(self, now: float) -> float:
        d = self.config.reducer_delay
        return float(d(now) if callable(d) else d)

    def _ignore(self, reason: str, detail: str = "") -> None:
        self.stats.ignored[reason] += 1
        level = logging.WARNING if self.stats.ignored[reason] == 1 else logging.DEBUG
        log.log(level, "route %s: ignoring control message (%s) %s", self.config.route, reason, detail)

    @property
    def dsync(self) -> float:
        """The interval this node syncs at now."""
        return self.client.dsync

    def leader(self, now: float) -> str | None:
        """The reducer elected in this node's view."""
        return self.membership.leader(now)

    # -- driving -------------------------------------------------------------------------------
    def tick(self, now: float) -> list[ControlOut]:
        """Send this router's SYNC when due; run the reducer if elected. Returns messages to publish."""
        if self.stopped:
            return []
        out: list[ControlOut] = []
        self.membership.timeout = self._timeout()
        self.port.refresh()
        if self.client.due(now):
            payload = self.port.payload()
            if payload is None:
                log.warning("route %s: partitioner not reachable, skipping a sync", self.config.route)
                self.client.skip(now)
            else:
                out.append(self.client.build_sync(payload, now))
                self.stats.syncs += 1
        out.extend(self._reduce(now))
        return out

    def _reduce(self, now: float) -> list[ControlOut]:
        out: list[ControlOut] = []
        if self._outbox and self._outbox[0][0] <= now:
            due, ready, msg = self._outbox.pop(0)
            self.reducer.emitted(ready, due)
            out.append(msg.model_copy(update={"sent_ms": max(0, int(due))}))
        leader = self.membership.leader(now)
        if not self.stats.leaders or self.stats.leaders[-1][1] != leader:
            self.stats.leaders.append((now, leader))
        red = self.reducer
        live = self.membership.live(now)
        if red.inflight and (red.inflight_reducer not in live or now - (red.inflight_since or now) > self._timeout()):
            red.reclaim()  # the reducer that closed the round died before answering: close it again
        if not red.ready(live):
            return out
        if leader != self.instance:
            red.close_elsewhere(now, leader)  # every node sees the same log: the reducer closes this round here
            return out
        if self._outbox:
            return out
        t0 = time.perf_counter()
        msg = self.reducer.build(now, self.instance)
        self.stats.globals_built += 1
        compute = (time.perf_counter() - t0) * 1000 if self.config.measure_compute else 0.0
        due = now + compute + self._delay(now)
        if due <= now:
            self.reducer.emitted(now, now)
            out.append(msg.model_copy(update={"sent_ms": max(0, int(now))}))
        else:
            self._outbox.append((due, now, msg))
        return out

    def receive_raw(self, raw: bytes | None, now: float) -> list[ControlOut]:
        """:meth:`receive` for a raw control-topic value; malformed values are logged and ignored."""
        try:
            msg = parse_control(raw)
        except ControlMessageError as exc:
            self._ignore("malformed", str(exc))
            return []
        return self.receive(msg, now)

    def receive(self, msg: ControlOut, now: float) -> list[ControlOut]:
        """Handle one control message (in topic order); returns messages to publish."""
        c = self.config
        if self.stopped:
            return []
        if msg.deployment != c.deployment:
            self._ignore("foreign deployment", msg.deployment)
            return []
        if msg.route != c.route:
            self._ignore("other route", msg.route)
            return []
        if msg.combiners and msg.combiners != c.combiners:
            self._ignore("combiner count", f"{msg.combiners} != {c.combiners}")
            return []
        # Liveness by arrival time (clock skew between hosts does not matter), except for history read at
        # start-up (sent before this node started): there the sender's time is all we have.
        at = min(now, float(msg.sent_ms)) if msg.sent_ms < c.stale_before else now
        if isinstance(msg, SyncMessage):
            if now - at > self._timeout():
                self._ignore("stale sync", f"from {msg.instance} at {msg.sent_ms}")
                return []
            self.membership.seen(msg.instance, at, leaving=msg.leaving)
            self.reducer.add(msg)
        else:
            self.reducer.observe(msg, now, own=msg.reducer == self.instance)
            period = self.client.dsync  # the interval the round's SYNCs were sent at
            update = self.client.accept_global(msg, now)
            if update is not None:
                try:
                    self.port.apply(update, self.client.dsync, len(msg.members), period)
                except (ValueError, KeyError, TypeError) as exc:
                    self._ignore("unusable global", str(exc))
                else:
                    self.last_global = msg
                    self.stats.globals_applied += 1
                    self.stats.hot_seen.update(msg.hot_keys)
                    self.stats.rounds.append((float(msg.sent_ms), msg.round, msg.reducer))
                    if self.client.last_latency is not None:
                        self.stats.latencies.append(self.client.last_latency)
                    if self.stats.dsync[-1][1] != self.client.dsync:
                        self.stats.dsync.append((now, self.client.dsync))
        return self._reduce(now)

    def leave(self, now: float, *, with_payload: bool = True) -> list[ControlOut]:
        """Clean shutdown: a last SYNC with ``leaving`` (nobody waits for this node any more).

        ``with_payload=False`` sends it without asking the partitioner (its data plane may be gone).
        """
        out: list[ControlOut] = []
        payload = self.port.payload() if with_payload else None
        out.append(self.client.build_sync(payload or {}, now, leaving=True))
        self.membership.self_leaving = True
        self.stopped = True
        return out
