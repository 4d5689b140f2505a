"""The router side of cooperative Dalton (Alg. 2): PREPARE / AWAIT, SYNC building, GLOBAL application.

A :class:`SyncClient` belongs to one (router instance, route). It never touches Kafka or threads: the
caller gets the partitioner's SYNC body through a :class:`PartitionerPort` (directly in-process, or on the
data-plane thread through ``RouteDataPlane.submit``), and hands GLOBAL messages back.

Times are plain floats in the transport's clock (wall milliseconds over Kafka, the stream's time units in
the benchmark). Syncs happen on a grid of DSYNC (``now // dsync``), so every router of a deployment sends
its SYNC of a round at the same moment and the reducer's wait for stragglers stays short.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from schemas.control import GlobalMessage, SyncMessage

__all__ = [
    "DirectPort",
    "PartitionerPort",
    "StatisticsWindow",
    "SyncClient",
    "SyncState",
    "SyncablePartitioner",
    "apply_dict",
    "as_syncable",
    "forwarding_allowed",
    "sync_from_payload",
]


class SyncState(enum.Enum):
    """Alg. 2's two states: learning locally (PREPARE), or waiting for the reducer's answer (AWAIT)."""

    PREPARE = "prepare"
    AWAIT = "await"


class StatisticsWindow(Protocol):
    """The statistics window of a syncable partitioner: its index and the load ``L`` of the previous one."""

    index: int  # current statistics window: time // stats_window (-1 before the first tuple)
    prev_load: int  # L: tuples of the previous statistics window (Alg. 1's hot-key threshold is L / n)


@runtime_checkable
class SyncablePartitioner(Protocol):
    """What the sync runtime uses of a partitioner that learns cooperatively (Alg. 2); Dalton is one.

    ``isinstance(p, SyncablePartitioner)`` is how the runtime finds the routes to sync. Every member below is
    touched by :class:`DirectPort`, :func:`router.sync.service.start_sync` or the node's health report, and
    only on the thread that owns the partitioner (the data-plane thread in a worker). Times are in the unit of
    the partitioner's ``times``.
    """

    name: ClassVar[str]
    key_forwarding: bool  # Sec. 4.2 flags on (the port turns them off when several routers sync too rarely)
    _forward: Any  # the last batch's forwarding flags (cleared when forwarding is turned off)

    @property
    def n(self) -> int:
        """Combiners."""
        ...

    @property
    def slide(self) -> float:
        """The sliding window's slide."""
        ...

    @property
    def stats_window(self) -> float:
        """Length of one statistics window."""
        ...

    @property
    def stats(self) -> StatisticsWindow:
        """The statistics window (``prev_load`` is set to the global load between batches)."""
        ...

    @property
    def buffer(self) -> list[Any]:
        """Rewards buffered while in AWAIT."""
        ...

    def params(self) -> dict[str, Any]:
        """Constructor arguments besides ``n`` (their digest must agree across the routers of a route)."""
        ...

    def sync_payload(self) -> Mapping[str, Any]:
        """The SYNC body (Q rows, weights, records, top keys, request-to-double); enters AWAIT."""
        ...

    def apply_global(self, message: Mapping[str, Any]) -> None:
        """Take the reducer's GLOBAL (Q rows, expirations, ``L = GL``), replay buffered rewards, leave AWAIT."""
        ...

    def leave_await(self) -> None:
        """No GLOBAL came: drop the buffered rewards and go back to PREPARE."""
        ...

    def _advance(self, t: float) -> None:
        """Move the windows to time ``t`` (never backwards); the next batch starting at ``t`` would do it too."""
        ...


def as_syncable(partitioner: object) -> SyncablePartitioner:
    """``partitioner`` as a :class:`SyncablePartitioner`; :class:`TypeError` when it cannot sync."""
    if not isinstance(partitioner, SyncablePartitioner):
        name = getattr(type(partitioner), "name", type(partitioner).__name__)
        raise TypeError(f"partitioner {name!r} does not learn cooperatively (no sync hooks)")
    return partitioner


class PartitionerPort(Protocol):
    """How a sync node reaches its partitioner (a :class:`SyncablePartitioner`, maybe on another thread)."""

    def payload(self) -> dict[str, Any] | None:
        """The partitioner's ``sync_payload()`` (enters AWAIT), or ``None`` if it cannot be reached now."""
        ...

    def apply(self, message: dict[str, Any], dsync: float, members: int = 2, period: float = 0.0) -> None:
        """``apply_global(message)``.

        ``dsync``: the interval from now on; ``members``: routers in the round; ``period``: the DSYNC the
        round's SYNCs were sent at (GL counts the records of that long).
        """
        ...

    def abandon(self) -> None:
        """``leave_await()``: no GLOBAL came, drop the buffered rewards and route with the local table."""
        ...

    def refresh(self) -> None:
        """Called on every tick, between batches (see :meth:`DirectPort.refresh`)."""
        ...

    def buffered(self) -> int:
        """Rewards the partitioner holds in AWAIT (a gauge: may be read from any thread, may be stale)."""
        ...


def forwarding_allowed(dsync: float, slide: float, comparable: bool = True) -> bool:
    """Key forwarding (Sec. 4.2) with several routers: only if a sync happens at least once per slide.

    ``comparable`` is ``False`` when DSYNC and the slide are in different units (count windows over a
    wall-clock DSYNC): then forwarding stays off.
    """
    return comparable and dsync <= slide


class DirectPort:
    """A partitioner in the caller's thread (benchmarks, tests); the data plane wraps one too.

    ``slide_comparable``: whether DSYNC and the partitioner's slide share a unit (key-forwarding policy).
    ``clock``: the stream time of the router's next tuple, when the caller knows it (the benchmark does).

    The global load: Alg. 2 line 18 sets ``L = GL`` until the next answer, and the paper maps the
    statistics window to DSYNC. The partitioner's ``apply_global`` sets ``L = GL`` but its next
    statistics-window change replaces it by the router's own load, after which locally frequent but
    globally cold keys become hot again (and are split until the reducer expires them). And DSYNC adapts
    while the statistics window does not, so GL (the records of one DSYNC) is rescaled to one statistics
    window at this router's own pace: ``GL`` is the routers' records over the period this router's last SYNC
    counted ``r`` of, so ``L = GL / r`` times this router's own load of its last statistics window. That holds
    whatever the clocks: a backlog routed at ten times its event-time rate would make a DSYNC period of wall
    clock hold ten statistics windows of event time, and a rescale by the clocks would then set ``L`` ten
    times too high (almost no key hot, so the largest keys were placed among the tail's). Before this router
    has counted a SYNC and a whole window: ``L = GL * stats_window / (period * window_per_clock)``,
    ``window_per_clock`` being the partitioner's time units per protocol-clock unit (1 in the benchmark, and
    for time windows over the wall clock of a live stream; ``None`` when they are not comparable, e.g. count
    windows over Kafka: then ``L = GL``). :meth:`refresh`, called between batches, sets ``L`` again after
    every window change, from that window's own load (with ``clock``, exactly at the change: the
    partitioner's windows are advanced to the next tuple's time first).
    """

    def __init__(
        self,
        partitioner: SyncablePartitioner,
        *,
        slide_comparable: bool = True,
        clock: Callable[[], float] | None = None,
        window_per_clock: float | None = 1.0,
    ) -> None:
        self.partitioner = partitioner
        self.forwarding = bool(partitioner.key_forwarding)  # as configured
        self.slide_comparable = slide_comparable
        self.clock = clock
        self.window_per_clock = window_per_clock
        self.global_load: int | None = None  # L: the global load of one statistics window
        self._gl_window = -1
        self._sent = 0  # records this router counted in its last SYNC (its share of the next GL)
        self._multiple: float | None = None  # the routers' records per record of this router, from the last GL
        self._own_load = 0  # this router's own load of its last statistics window, before L was set over it

    def payload(self) -> dict[str, Any] | None:
        """``sync_payload()``."""
        body = dict(self.partitioner.sync_payload())
        self._sent = int(body.get("records") or 0)
        return body

    def abandon(self) -> None:
        """``leave_await()`` (no GLOBAL came in time)."""
        self.partitioner.leave_await()

    def buffered(self) -> int:
        """Rewards buffered in AWAIT."""
        return len(self.partitioner.buffer)

    def _advance(self) -> None:
        if self.clock is not None:
            self.partitioner._advance(float(self.clock()))  # time only moves forward: the next batch starts here

    def refresh(self) -> None:
        """Between batches: keep the global load estimate in a new statistics window (see the class doc)."""
        if self.global_load is None:
            return
        self._advance()
        stats = self.partitioner.stats
        if stats.index != self._gl_window:
            own = int(stats.prev_load)  # the window change set the router's own load
            scaled = round(self._multiple * own) if self._multiple is not None and own > 0 else None
            stats.prev_load = self.global_load if scaled is None else scaled
            self._own_load = own
            self._gl_window = stats.index

    def apply(self, message: dict[str, Any], dsync: float, members: int = 2, period: float = 0.0) -> None:
        """``apply_global(message)``, the global load per window and the key-forwarding policy (Sec. 4.2)."""
        p = self.partitioner
        self._advance()
        gl = int(message.get("global_load") or 0)
        own = self._own_load if p.stats.index == self._gl_window else int(p.stats.prev_load)
        if gl and self._sent > 0 and own > 0:  # at this router's own pace (see the class doc)
            self._multiple = gl / self._sent
            gl = round(self._multiple * own)
        elif gl and period > 0 and self.window_per_clock:
            self._multiple = None
            gl = round(gl * float(p.stats_window) / (period * self.window_per_clock))
        if gl:
            message = {**message, "global_load": gl}
        p.apply_global(message)  # sets L = GL
        if gl:
            self.global_load = gl
            self._own_load = own
            self._gl_window = p.stats.index
        alone = members <= 1
        allowed = self.forwarding and (alone or forwarding_allowed(dsync, float(p.slide), self.slide_comparable))
        if p.key_forwarding and not allowed:
            p._forward = np.zeros(0, dtype=bool)  # the partitioner keeps the last batch's flags when off
        p.key_forwarding = allowed


def sync_from_payload(
    payload: Mapping[str, Any],
    *,
    deployment: str,
    route: str,
    instance: str,
    seq: int,
    combiners: int,
    sent_ms: int,
    due_ms: int | None = None,
    leaving: bool = False,
    fingerprint: str = "",
    after_round: int = -1,
) -> SyncMessage:
    """The SYNC control message of a partitioner's ``sync_payload()`` (keys as decimal strings)."""
    return SyncMessage(
        deployment=deployment,
        route=route,
        instance=instance,
        seq=seq,
        combiners=combiners,
        fingerprint=fingerprint,
        after_round=max(-1, after_round),
        sent_ms=max(0, sent_ms),
        due_ms=max(0, sent_ms if due_ms is None else due_ms),
        records=int(payload.get("records", 0)),
        q_table={str(k): [round(float(x), 6) for x in row] for k, row in payload.get("qtable", {}).items()},
        weights={str(k): int(w) for k, w in payload.get("weights", {}).items()},
        top_keys=[(str(k), int(c)) for k, c in payload.get("top_keys", [])],
        double=bool(payload.get("request_double", False)),
        leaving=leaving,
        stats_window=int(payload.get("stats_window", 0)),
    )


def apply_dict(msg: GlobalMessage) -> dict[str, Any]:
    """The ``apply_global`` argument of a GLOBAL message (keys as 64-bit integers)."""
    return {
        "qtable": {int(k): list(row) for k, row in msg.q_table.items()},
        "hot": [int(k) for k in msg.hot_keys],
        "expire": [int(k) for k in msg.expired],
        "global_load": msg.global_load,
    }


class SyncClient:
    """One router's protocol state for one route (Alg. 2, lines 13-20).

    ``dsync`` is the initial interval (the reducer's GLOBAL messages change it). ``stale_before``: GLOBAL
    messages sent before this time (e.g. read back from the control topic's history at start-up) are
    not applied. ``fingerprint``: the partitioner parameters' digest, carried by every SYNC.

    Schedule: SYNCs are due on a DSYNC grid of the *reducer's* clock, as seen through the arrival of its
    last GLOBAL (``grid_offset`` = arrival here - ``sent_ms`` there: its clock skew plus the delivery time,
    which is about the same for every member); on this node's own clock's grid only until a GLOBAL comes.
    Every member reads the same GLOBAL at about the same moment, so their SYNCs are in phase whatever
    their clocks say. With a grid of each member's own wall clock they were out of phase by their skew
    modulo DSYNC: a round closed only when the latest member sent, the earliest one found its reply still
    pending at its next SYNC and asked the reducer to double DSYNC, and the GLOBAL rate fell (3 workers
    300 ms apart, adaptive DSYNC, a loop running every 200 ms: 162 GLOBALs in 2 minutes against 473).
    The grid keeps the period at DSYNC, and a reply slower than DSYNC still asks for a doubling.
    """

    def __init__(
        self,
        *,
        deployment: str,
        route: str,
        instance: str,
        combiners: int,
        dsync: float,
        stale_before: float = -math.inf,
        fingerprint: str = "",
    ) -> None:
        if dsync <= 0:
            raise ValueError(f"dsync must be > 0, got {dsync!r}")
        self.deployment, self.route, self.instance, self.combiners = deployment, route, instance, combiners
        self.fingerprint = fingerprint
        self.dsync = float(dsync)
        self.state = SyncState.PREPARE
        self.seq = 0
        self.last_round = -1
        self.last_reducer = ""
        self.last_sent = -1
        self.stale_before = stale_before
        self.next_due: float | None = None
        self.grid_offset = 0.0  # local clock minus the last GLOBAL's sender clock (0: this node's own grid)
        self.sent = self.applied = self.doubles_requested = 0
        self.awaited_since: float | None = None
        self.last_latency: float | None = None

    def due(self, now: float) -> bool:
        """Whether a SYNC is due at ``now`` (the first call only schedules the first one)."""
        if self.next_due is None:
            self.next_due = self._grid_after(now)
            return False
        return now >= self.next_due

    def _grid_after(self, now: float) -> float:
        """The next point of the shared DSYNC grid: multiples of DSYNC on the last reducer's clock."""
        return (math.floor((now - self.grid_offset) / self.dsync) + 1) * self.dsync + self.grid_offset

    def skip(self, now: float) -> None:
        """No SYNC this time (the partitioner could not be reached): try again at the next grid point."""
        self.next_due = self._grid_after(now)

    def build_sync(self, payload: Mapping[str, Any], now: float, *, leaving: bool = False) -> SyncMessage:
        """The SYNC for ``payload`` (just taken from the partitioner): enters AWAIT, schedules the next."""
        msg = sync_from_payload(
            payload,
            deployment=self.deployment,
            route=self.route,
            instance=self.instance,
            seq=self.seq,
            combiners=self.combiners,
            sent_ms=int(now),
            due_ms=int(now if leaving or self.next_due is None else min(self.next_due, now)),
            leaving=leaving,
            fingerprint=self.fingerprint,
            after_round=self.last_round,
        )
        self.seq += 1
        self.sent += 1
        self.doubles_requested += int(msg.double)
        if self.state is SyncState.PREPARE:
            self.awaited_since = now
        self.state = SyncState.AWAIT
        self.next_due = self._grid_after(now)
        return msg

    def await_expired(self, now: float, rounds: float) -> bool:
        """In AWAIT for more than ``rounds`` x DSYNC without a GLOBAL: give up (back to PREPARE).

        The caller takes the partitioner out of AWAIT too (it routes with its local table; the buffered
        rewards are dropped, the local table has learned them already).
        """
        if self.state is not SyncState.AWAIT or self.awaited_since is None:
            return False
        if now - self.awaited_since <= rounds * self.dsync:
            return False
        self.state = SyncState.PREPARE
        self.awaited_since = None
        return True

    def accept_global(self, msg: GlobalMessage, now: float) -> dict[str, Any] | None:
        """The ``apply_global`` dict if ``msg`` is a new round for this route, else ``None``; back to PREPARE."""
        if msg.deployment != self.deployment or msg.route != self.route:
            return None
        if msg.sent_ms < self.stale_before:
            return None
        if msg.round <= self.last_round and not (msg.reducer != self.last_reducer and msg.sent_ms > self.last_sent):
            return None  # a round seen already (a new reducer that restarted the numbering is followed)
        self.last_round, self.last_reducer, self.last_sent = msg.round, msg.reducer, msg.sent_ms
        self.dsync = float(msg.dsync_ms)
        # the reducer's clock as seen here (its skew + the delivery time); only its phase matters, and the
        # modulo keeps the arithmetic exact whatever sent_ms a writer put in (the next SYNC is in (now, now + DSYNC])
        self.grid_offset = (now - float(msg.sent_ms)) % self.dsync
        self.next_due = self._grid_after(now)
        if self.awaited_since is not None and self.instance in msg.seqs:
            self.last_latency = now - self.awaited_since
        self.awaited_since = None
        self.state = SyncState.PREPARE
        self.applied += 1
        return apply_dict(msg)
