"""One (router instance, route) in the sync protocol: client + membership + (possibly elected) reducer.

A :class:`SyncNode` is transport-agnostic: a transport calls :meth:`SyncNode.tick` regularly and
:meth:`SyncNode.receive` (or :meth:`SyncNode.receive_raw`) for every control message of the topic, in
the topic's order, *including the node's own*; it publishes whatever these return. Every node sees the
same messages, so every node has the same membership, the same pending round and the same elected
reducer (the lowest live instance id); only that one builds rounds. A dead reducer stops sending SYNCs,
the liveness timeout drops it everywhere, and the next lowest id closes the pending round.

Hardening (every bound is a :class:`NodeConfig` field):

- a round closes when every member of the *round set* has reported, or ``round_deadline`` x DSYNC after
  its first SYNC arrived, with whoever reported (rounds are keyed by arrival order, so clock skew between
  workers changes nothing); a member missing from ``miss_limit`` rounds in a row leaves the round set
  until it reports again;
- a partitioner in AWAIT for ``await_rounds`` x DSYNC without a GLOBAL leaves it (local table);
- a reducer holding a closable round for the takeover timeout (``takeover_factor`` x the liveness timeout)
  without a GLOBAL is deposed (see :class:`~router.sync.membership.Membership`); a node that still waits
  for a reducer elected that long while another member answers the round deposes it too (the views agree
  again even when only one node's timer ran out);
- messages of another route, deployment, combiner count or parameter ``fingerprint``, over ``max_bytes``
  or ``max_rows``, are counted in ``NodeStats.ignored`` and dropped; outgoing messages are cut to fit
  (rows of least weight first, ``NodeStats.rows_cut``);
- pending SYNCs, members and every statistic are bounded (``NodeStats`` keeps the last
  :data:`HISTORY` entries of each series).

The reducer's GLOBAL leaves at :meth:`SyncNode.release_time`: when the round was ready plus, with
``measure_compute``, the measured computation time (milliseconds: wall-clock transports only). Until then it
waits in the node's outbox and the node builds no other round.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from router.sync.client import SyncClient
from router.sync.membership import Membership
from router.sync.port import PartitionerPort
from router.sync.reducer import DsyncPolicy, QtableReducer
from schemas.control import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    ControlMessageError,
    GlobalMessage,
    SyncMessage,
    fit_message,
    parse_control,
)

__all__ = ["HISTORY", "NodeConfig", "NodeStats", "SyncNode"]

#: Entries kept of each NodeStats series (and keys of ``hot_seen``).
HISTORY = 4096

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
    measure_compute: bool = False
    stale_before: float = -math.inf  # GLOBALs sent earlier are not applied (history read at start-up)
    fingerprint: str = ""  # digest of the partitioner parameters ("" : not checked)
    round_deadline: float = 1.5  # x DSYNC after a round's first SYNC: close with whoever reported
    miss_limit: int = 3  # rounds missed in a row before a member leaves the round set
    await_rounds: float = 3.0  # x DSYNC in AWAIT without a GLOBAL: the partitioner leaves AWAIT
    takeover_factor: float = 2.0  # x the liveness timeout: a reducer holding a round that long is deposed
    max_bytes: int = DEFAULT_MAX_BYTES  # control value size limit (read and write)
    max_rows: int = DEFAULT_MAX_ROWS  # row cap per message (read and write)
    max_members: int = 1024  # live members / pending senders at most
    max_pending: int = 8  # pending SYNCs per member at most (older ones are folded in)


def _series() -> deque[tuple[float, float]]:
    return deque(maxlen=HISTORY)


class RecentSet(dict[str, None]):
    """The last :data:`HISTORY` distinct keys added (an insertion-ordered set)."""

    def update_keys(self, keys: object) -> None:
        """Add ``keys`` (an iterable of str), dropping the oldest beyond the cap."""
        for k in keys:  # type: ignore[attr-defined]
            self.pop(k, None)
            self[k] = None
        while len(self) > HISTORY:
            del self[next(iter(self))]


@dataclass
class NodeStats:
    """Counters and (bounded) time series of one node (the convergence report reads them)."""

    syncs: int = 0
    globals_built: int = 0
    globals_applied: int = 0
    ignored: Counter[str] = field(default_factory=Counter)
    dsync: deque[tuple[float, float]] = field(default_factory=_series)  # (time, DSYNC) on every change
    leaders: deque[tuple[float, str | None]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))  # SYNC -> GLOBAL applied
    hot_seen: RecentSet = field(default_factory=RecentSet)  # keys GLOBALs marked globally hot (the last ones)
    rounds: deque[tuple[float, int, str]] = field(default_factory=lambda: deque(maxlen=HISTORY))  # (sent, round, by)
    rounds_by_deadline: int = 0  # rounds this node closed at the deadline (not every member reported)
    await_timeouts: int = 0  # times the partitioner left AWAIT without a GLOBAL
    deposed: int = 0  # reducers this node saw deposed
    rows_cut: int = 0  # Q rows left out of outgoing messages (size or row cap)
    last_global_at: float | None = None  # when the last GLOBAL was applied (transport clock)
    last_round_size: int = 0  # members of the last applied GLOBAL


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
            fingerprint=c.fingerprint,
        )
        self.reducer = QtableReducer(
            deployment=c.deployment,
            route=c.route,
            combiners=c.combiners,
            dsync=c.dsync,
            policy=c.policy or DsyncPolicy.around(c.dsync),
            fingerprint=c.fingerprint,
            miss_limit=c.miss_limit,
            max_per_member=c.max_pending,
            max_members=c.max_members,
        )
        self.membership = Membership(c.instance, self._timeout(), max_members=c.max_members)
        self.stats = NodeStats()
        self.stats.dsync.append((-math.inf, float(c.dsync)))
        self._outbox: list[tuple[float, float, GlobalMessage]] = []  # (send at, ready at, message)
        self._stall_since: float | None = None  # a round waits for the elected reducer since then
        self._stall_leader: str | None = None  # (that reducer)
        self._leader_since = -math.inf  # when this node's view last changed its elected reducer
        self.last_global: GlobalMessage | None = None
        self.stopped = False

    # -- helpers -------------------------------------------------------------------------------
    def _timeout(self) -> float:
        c = self.config
        return max(c.liveness_floor, c.liveness_factor * max(self.client.dsync, self.reducer.dsync))

    def takeover_timeout(self) -> float:
        """How long a round may wait for the elected reducer's GLOBAL before that reducer is deposed."""
        return self.config.takeover_factor * self._timeout()

    def release_time(self, ready: float, compute: float) -> float:
        """When a GLOBAL whose round was ready at ``ready`` and took ``compute`` to build may be published.

        Never earlier than ``ready``; a subclass may hold GLOBALs back longer (the lab's slow reducer).
        """
        return ready + compute

    def _ignore(self, reason: str, detail: str = "") -> None:
        self.stats.ignored[reason] += 1
        level = logging.WARNING if self.stats.ignored[reason] == 1 else logging.DEBUG
        log.log(level, "route %s: ignoring control message (%s) %s", self.config.route, reason, detail)

    def _fit(self, msg: ControlOut) -> ControlOut:
        c = self.config
        out, cut = fit_message(msg, max_bytes=c.max_bytes, max_rows=c.max_rows)
        if cut:
            self.stats.rows_cut += cut
            log.info("route %s: %d Q rows left out of a %s (size or row cap)", c.route, cut, msg.type)
        return out

    @property
    def dsync(self) -> float:
        """The interval this node syncs at now."""
        return self.client.dsync

    def leader(self, now: float) -> str | None:
        """The reducer elected in this node's view."""
        return self.membership.leader(now)

    def health(self, now: float) -> dict[str, float | int | None]:
        """Sync health: last GLOBAL age, last round size, pending SYNCs, members, ignored messages."""
        s = self.stats
        return {
            "last_global_age_ms": None if s.last_global_at is None else max(0.0, now - s.last_global_at),
            "round_size": s.last_round_size,
            "pending": self.reducer.pending_syncs(),
            "members": len(self.membership.last_seen),
            "ignored": sum(s.ignored.values()),
            "await_timeouts": s.await_timeouts,
            "deposed": s.deposed,
            "rows_cut": s.rows_cut,
            "buffered": self.port.buffered(),
        }

    # -- driving -------------------------------------------------------------------------------
    def tick(self, now: float) -> list[ControlOut]:
        """Send this router's SYNC when due; run the reducer if elected. Returns messages to publish."""
        if self.stopped:
            return []
        out: list[ControlOut] = []
        self.membership.timeout = self._timeout()
        self.port.refresh()
        if self.client.await_expired(now, self.config.await_rounds):
            self.stats.await_timeouts += 1
            log.warning("route %s: no GLOBAL for %.0f x DSYNC, routing with the local table", self.config.route,
                        self.config.await_rounds)  # fmt: skip
            self.port.abandon()
        if self.client.due(now):
            payload = self.port.payload()
            if payload is None:
                log.warning("route %s: partitioner not reachable, skipping a sync", self.config.route)
                self.client.skip(now)
            else:
                out.append(self._fit(self.client.build_sync(payload, now)))
                self.stats.syncs += 1
        out.extend(self._reduce(now))
        return out

    def _check_stall(self, now: float, leader: str | None, closable: bool) -> None:
        """Depose an elected reducer (not this node) that holds a closable round past the takeover timeout."""
        busy = closable or bool(self.reducer.inflight)
        if leader is None or leader == self.instance or not busy:
            self._stall_since = None
            return
        if self._stall_since is None or self._stall_leader != leader:  # the timeout is the elected one's
            self._stall_since, self._stall_leader = now, leader
        elif now - self._stall_since > self.takeover_timeout():
            log.warning("route %s: reducer %s sent no GLOBAL for %.0f ms; deposing it", self.config.route, leader,
                        now - self._stall_since)  # fmt: skip
            self.membership.depose(leader, now, 10 * self.takeover_timeout())
            self.stats.deposed += 1
            self._stall_since = None

    def _reduce(self, now: float) -> list[ControlOut]:
        out: list[ControlOut] = []
        if self._outbox and self._outbox[0][0] <= now:
            due, ready, msg = self._outbox.pop(0)
            self.reducer.emitted(ready, due)
            out.append(msg.model_copy(update={"sent_ms": max(0, int(due))}))
        red = self.reducer
        live = self.membership.live(now)
        wait = red.round_set(live)
        deadline = self.config.round_deadline * max(self.client.dsync, red.dsync)
        self._check_stall(now, self.membership.leader(now), red.closable(wait, now, deadline) is not None)
        leader = self.membership.leader(now)
        if not self.stats.leaders or self.stats.leaders[-1][1] != leader:
            self.stats.leaders.append((now, leader))
            self._leader_since = now
        gone = red.inflight_reducer not in live or red.inflight_reducer in self.membership.deposed
        if red.inflight and (gone or now - (red.inflight_since or now) > self._timeout()):
            red.reclaim()  # the reducer that closed the round died before answering: close it again
        state = red.closable(wait, now, deadline)
        if state is None:
            return out
        if leader != self.instance:
            if state == "complete":
                red.close_elsewhere(now, leader)  # every node sees the same log: the reducer closes this round
            return out
        if self._outbox:
            return out
        t0 = time.perf_counter()
        msg = self.reducer.build(now, self.instance, live)
        self.stats.globals_built += 1
        self.stats.rounds_by_deadline += state == "deadline"
        msg = self._fit(msg)  # type: ignore[assignment]
        compute = (time.perf_counter() - t0) * 1000 if self.config.measure_compute else 0.0
        due = self.release_time(now, compute)
        if due <= now:
            self.reducer.emitted(now, now)
            out.append(msg.model_copy(update={"sent_ms": max(0, int(now))}))
        else:
            self._outbox.append((due, now, msg))
        return out

    def receive_raw(self, raw: bytes | None, now: float) -> list[ControlOut]:
        """:meth:`receive` for a raw control-topic value; malformed, oversized values are logged and ignored."""
        c = self.config
        try:
            msg = parse_control(raw, max_bytes=c.max_bytes, max_rows=c.max_rows)
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
        if c.fingerprint and msg.fingerprint != c.fingerprint:  # (none is incompatible too)
            self._ignore("incompatible parameters", f"fingerprint {msg.fingerprint} != {c.fingerprint}")
            return []
        # Liveness by arrival time (clock skew between hosts does not matter), except for history read at
        # start-up (sent before this node started): there the sender's time is all we have.
        at = min(now, float(msg.sent_ms)) if msg.sent_ms < c.stale_before else now
        if isinstance(msg, SyncMessage):
            if now - at > self._timeout():
                self._ignore("stale sync", f"from {msg.instance} at {msg.sent_ms}")
                return []
            if not self.membership.seen(msg.instance, at, leaving=msg.leaving):
                self._ignore("too many members", msg.instance)
                return []
            if not self.reducer.add(msg, now):
                self._ignore("too many members", msg.instance)
                return []
        else:
            self._global(msg, now)
        return self._reduce(now)

    def _global(self, msg: GlobalMessage, now: float) -> None:
        live = self.membership.live(now)
        elected = self.stats.leaders[-1][1] if self.stats.leaders else None
        if (
            msg.reducer != self.instance
            and elected == self.instance
            and msg.round > self.reducer.published
            and now - self._leader_since > self.takeover_timeout()
        ):
            log.warning("route %s: %s answered round %d while this node was the reducer: deposed", self.config.route,
                        msg.reducer, msg.round)  # fmt: skip
            self.membership.depose(self.instance, now, 10 * self.takeover_timeout())
            self.stats.deposed += 1
        elif (
            elected is not None
            and elected not in (self.instance, msg.reducer)
            and self._stall_since is not None
            and self._stall_leader == elected
            and msg.round > self.reducer.published
            and now - self._leader_since > self.takeover_timeout()
        ):  # another member deposed the reducer this node still waits for, and answers its rounds: follow it
            log.warning("route %s: %s answered round %d while %s held it: deposed", self.config.route, msg.reducer,
                        msg.round, elected)  # fmt: skip
            self.membership.depose(elected, now, 10 * self.takeover_timeout())
            self.stats.deposed += 1
            self._stall_since = None
        self.reducer.observe(msg, now, own=msg.reducer == self.instance, live=live)
        period = self.client.dsync  # the interval the round's SYNCs were sent at
        update = self.client.accept_global(msg, now)
        if update is None:
            return
        try:
            self.port.apply(update, self.client.dsync, len(msg.members), period)
        except (ValueError, KeyError, TypeError) as exc:
            self._ignore("unusable global", str(exc))
            return
        s = self.stats
        self.last_global = msg
        s.globals_applied += 1
        s.last_global_at = now
        s.last_round_size = len(msg.members)
        s.hot_seen.update_keys(msg.hot_keys)
        s.rounds.append((float(msg.sent_ms), msg.round, msg.reducer))
        if self.client.last_latency is not None:
            s.latencies.append(self.client.last_latency)
        if s.dsync[-1][1] != self.client.dsync:
            s.dsync.append((now, self.client.dsync))

    def leave(self, now: float, *, with_payload: bool = True) -> list[ControlOut]:
        """Clean shutdown: a last SYNC with ``leaving`` (nobody waits for this node any more).

        ``with_payload=False`` sends it without asking the partitioner (its data plane may be gone).
        """
        out: list[ControlOut] = []
        payload = self.port.payload() if with_payload else None
        out.append(self._fit(self.client.build_sync(payload or {}, now, leaving=True)))
        self.membership.self_leaving = True
        self.stopped = True
        return out
