"""How the sync runtime reaches a partitioner that learns cooperatively (Dalton).

:class:`SyncablePartitioner` is what the runtime needs of such a partitioner; :class:`PartitionerPort` is how a
sync node reaches it (maybe on another thread); :class:`DirectPort` is the port for a partitioner in the caller's
thread, and keeps the global load ``L`` and the key-forwarding policy between GLOBALs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "DirectPort",
    "PartitionerPort",
    "StatisticsWindow",
    "SyncablePartitioner",
    "as_syncable",
    "forwarding_allowed",
]


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
    def independent(self) -> bool:
        """Its keys are its own and it places them alone: the global load is not its threshold."""
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
        gl = 0 if p.independent else int(message.get("global_load") or 0)
        own = self._own_load if p.stats.index == self._gl_window else int(p.stats.prev_load)
        if gl and self._sent > 0 and own > 0:  # at this router's own pace (see the class doc)
            self._multiple = gl / self._sent
            gl = round(self._multiple * own)
        elif gl and period > 0 and self.window_per_clock:
            self._multiple = None
            gl = round(gl * float(p.stats_window) / (period * self.window_per_clock))
        if gl:
            message = {**message, "global_load": gl}
        p.apply_global({**message, "members": members})  # sets L = GL; a router alone stays alone
        if gl:
            self.global_load = gl
            self._own_load = own
            self._gl_window = p.stats.index
        alone = members <= 1
        allowed = self.forwarding and (alone or forwarding_allowed(dsync, float(p.slide), self.slide_comparable))
        if p.key_forwarding and not allowed:
            p._forward = np.zeros(0, dtype=bool)  # the partitioner keeps the last batch's flags when off
        p.key_forwarding = allowed
