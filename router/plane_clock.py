"""The data plane's sense of event time: the partitioners' window clock and whether a route is catching up.

A partitioner's windows (Dalton's statistics window and scopes, the window metrics) need a non-decreasing clock,
and the consumer downstream works in *arrival order*: Spark's micro-batches are offset ranges of the combiner
topic, so a record's micro-batch depends on when it was routed, not on its event time. The clock therefore
follows the order in which the router routes, at the pace at which the raw partitions advance in event time.

Under a backlog the raw partitions do not advance together. A consume batch holds one chunk per raw partition,
and a raw topic keyed by the routing key has partitions of very different sizes: the one holding the hottest key
may hold 40 % of the records and a small one 2 %, so a small partition comes whole in one batch, spanning the
whole backlog's event time, while the large one takes many batches to cover the same span. A clock driven by the
batch's newest time (or by its overall advance) jumps to the end of the backlog with that one small partition;
every later batch of the large one is then stamped in the last slide, and the partitioner balances one long
window instead of the slides Spark reads.

:class:`WindowClock` instead advances by the *mean* advance of the raw partitions. Each partition keeps its own
front (its newest event time), and a batch moves the clock by the sum of the fronts' advances divided by the
number of partitions whose front moved within the last ``recent_s``. A partition that delivers nothing, or only
older records, is not counted, so it does not slow the clock down; one seen for the first time (or again after
``forget_s``) counts only its own advance from its first record. The clock never passes the newest front, and
never stays behind the lowest front of the counted partitions: a live route whose partitions move together
runs at their pace, whatever the mean did while one of them fell silent. With one raw partition, or partitions
that advance together, this is the batch's own advance of event time.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["CatchUp", "WindowClock"]

#: A partition whose newest event time moved within this many seconds of wall time counts in the mean advance.
RECENT_S = 1.0
#: A partition whose newest event time did not move for this long is forgotten: it counts as new when it moves.
FORGET_S = 10.0


class WindowClock:
    """The window clock of one data plane (see the module docstring), in event-time ms."""

    def __init__(self, recent_s: float = RECENT_S, forget_s: float = FORGET_S) -> None:
        self.recent_s, self.forget_s = recent_s, forget_s
        self.now = 0  # the last stamp given
        self._fronts: dict[int, tuple[int, float]] = {}  # raw partition -> (newest event time, wall s it moved)

    def stamp(
        self, times: npt.NDArray[np.int64], partitions: npt.NDArray[np.int64], wall_s: float
    ) -> npt.NDArray[np.int64]:
        """The clock of one batch's records, in arrival order (``partitions``: each record's raw partition).

        The batch's advance ``a`` (see the module docstring) is shared evenly in arrival order: from ``base =
        max(now, min(times) - 1)`` (so the first batch, or one after a gap in event time, starts at its own
        earliest time), record ``i`` of ``m`` gets ``base + (i + 1) * a // m``.
        """
        m = int(times.size)
        if m == 0:
            return np.zeros(0, dtype=np.int64)
        advance = 0
        for p, (lo, hi) in _partition_spans(times, partitions).items():
            front, moved = self._fronts.get(p, (lo - 1, wall_s))
            if hi > front:
                advance += hi - front
                front, moved = hi, wall_s
            self._fronts[p] = (front, moved)
        recent, newest, low = 0, 0, None
        for p, (front, moved) in list(self._fronts.items()):
            if wall_s - moved > self.forget_s:
                del self._fronts[p]
                continue
            newest = max(newest, front)
            if wall_s - moved <= self.recent_s:
                recent += 1
                low = front if low is None else min(low, front)
        base = max(self.now, int(times.min()) - 1)
        pace = (self.now or base) + advance // max(1, recent)  # the first batch starts at its earliest time
        end = max(base, min(newest, pace if low is None else max(pace, low)))
        steps = np.arange(1, m + 1, dtype=np.int64)
        clock = np.asarray(base + (steps * (end - base)) // m, dtype=np.int64)
        self.now = int(clock[-1])
        return clock


class CatchUp:
    """Whether a route is catching up on a backlog, judged batch by batch from its window clock and wall clock.

    Spark's micro-batches span many of the route's slides when the router routes records faster than their
    event time passes: a restart, or a backlog. Then the window clock is more than ``behind_ms`` behind wall
    clock, and it advances at least ``pace`` times as fast as wall clock. The pace is measured from an anchor
    ``(wall, clock)`` moved every ``span_s`` of wall time. A pace that fast counts once ``settle_s`` of wall time
    has passed since the anchor; a slower one only over a whole span, so a worker that waits a moment (a commit,
    its peers, a busy core) keeps catching up. A judgement switched back and forth moved keys between slides:
    the rules differ. At the start a clock that far behind is taken as catching up, as a worker restarted on a
    backlog is, until the pace says otherwise: the first batches of a catch-up would otherwise be placed slide
    by slide. A live route whose event times lag wall clock (a source that delivers late) advances at pace 1:
    not a backlog, after its first span.
    """

    def __init__(self, behind_ms: float, pace: float = 2.0, span_s: float = 1.0, settle_s: float = 0.05) -> None:
        self.behind_ms, self.pace, self.span_s, self.settle_s = behind_ms, pace, span_s, settle_s
        self._anchor: tuple[float, int] | None = None
        self._fast = True

    def update(self, wall_ms: int, clock_ms: int) -> bool:
        """Judge a batch whose window clock ends at ``clock_ms`` (routed at ``wall_ms``); whether to catch up."""
        if self._anchor is None:
            self._anchor = (wall_ms / 1000, clock_ms)
        wall0, clock0 = self._anchor
        elapsed = wall_ms / 1000 - wall0
        if elapsed >= self.settle_s:
            fast = clock_ms - clock0 >= self.pace * elapsed * 1000
            if fast or elapsed >= self.span_s:  # slow only over a whole span (see the class doc)
                self._fast = fast
            if elapsed >= self.span_s:
                self._anchor = (wall_ms / 1000, clock_ms)
        return self._fast and wall_ms - clock_ms > self.behind_ms


def _partition_spans(times: npt.NDArray[np.int64], partitions: npt.NDArray[np.int64]) -> dict[int, tuple[int, int]]:
    """Per raw partition of a batch: its ``(earliest, newest)`` event time.

    A consume batch holds runs of one partition (a chunk each, or the alignment's slices), so the runs are
    reduced with numpy and only the runs are visited in Python.
    """
    starts = np.concatenate(([0], np.flatnonzero(partitions[1:] != partitions[:-1]) + 1))
    los = np.minimum.reduceat(times, starts)
    his = np.maximum.reduceat(times, starts)
    spans: dict[int, tuple[int, int]] = {}
    for p, lo, hi in zip(partitions[starts].tolist(), los.tolist(), his.tolist(), strict=True):
        if p in spans:
            lo0, hi0 = spans[p]
            lo, hi = min(lo, lo0), max(hi, hi0)
        spans[p] = (lo, hi)
    return spans
