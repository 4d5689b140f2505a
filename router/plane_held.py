"""What the event-time alignment holds back of one raw partition, and the batch helpers it uses.

:class:`Held` keeps one partition's records consumed and not routed yet, in offset order. Releases take records
from its front by moving a head index: a small release out of a large hold, every turn while the peers hold a
worker back, must not copy what stays held.
"""

from __future__ import annotations

import bisect

import numpy as np
import numpy.typing as npt

from router.extract import BadRecord, Extracted

__all__ = ["Held", "extend", "first_offsets", "partition_runs"]


class Held:
    """One raw partition's records consumed and not routed yet, in offset order.

    The lists keep records already taken in front of ``head`` (taking is O(1); they are dropped once they are
    half of the lists): a small release out of a large hold, each turn, must not copy what stays held.
    """

    __slots__ = ("_ts", "bad", "head", "keys", "measures", "offsets", "times", "values")

    def __init__(self) -> None:
        self.head = 0  # records before it are taken
        self.keys: list[str] = []
        self.times: list[int] = []
        self.measures: list[float | None] = []
        self.values: list[bytes] = []
        self.offsets: list[int] = []
        self._ts: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.bad: list[BadRecord] = []

    def __len__(self) -> int:
        return len(self.keys) - self.head + len(self.bad)

    @property
    def ts(self) -> npt.NDArray[np.int64]:
        """The event times of the records held (a view)."""
        return self._ts[self.head :]

    def add(self, ext: Extracted, a: int, b: int, ts: npt.NDArray[np.int64]) -> None:
        """Append ``ext``'s records ``a:b`` (all of this partition; ``ts``: their event times)."""
        self._compact(0)
        self.keys += ext.keys[a:b]
        self.times += ext.times[a:b]
        self.measures += ext.measures[a:b]
        self.values += ext.values[a:b]
        self.offsets += ext.offsets[a:b]
        self._ts = np.concatenate([self._ts, ts]) if self._ts.size else ts

    def first(self) -> int | None:
        """The lowest offset held (good or bad record)."""
        held = self.head < len(self.offsets)
        firsts = ([self.offsets[self.head]] if held else []) + [b.message.offset() or 0 for b in self.bad]
        return min(firsts) if firsts else None

    def last(self) -> int | None:
        """The highest offset held (good or bad record)."""
        held = self.head < len(self.offsets)
        lasts = ([self.offsets[-1]] if held else []) + [b.message.offset() or 0 for b in self.bad]
        return max(lasts) if lasts else None

    def drop_from(self, offset: int) -> None:
        """Forget the records at or after ``offset`` (they will be read again)."""
        k = bisect.bisect_left(self.offsets, offset, lo=self.head)
        self.keys, self.times, self.measures = self.keys[:k], self.times[:k], self.measures[:k]
        self.values, self.offsets, self._ts = self.values[:k], self.offsets[:k], self._ts[:k]
        self.bad = [b for b in self.bad if (b.message.offset() or 0) < offset]

    def take(self, k: int) -> tuple[list[BadRecord], int]:
        """Take the first ``k`` records held and the bad records before the next; those bad records and the cut."""
        at = self.head + k
        cut = self.offsets[at] if at < len(self.offsets) else 1 << 62
        taken = [b for b in self.bad if (b.message.offset() or 0) < cut]
        self.bad = [b for b in self.bad if (b.message.offset() or 0) >= cut]
        self.head = at
        self._compact(len(self.keys) // 2)
        return taken, cut

    def records(self, a: int, b: int) -> tuple[list[str], list[int], list[float | None], list[bytes], list[int]]:
        """Keys, times, measures, values and offsets of held records ``a:b``."""
        a, b = a + self.head, b + self.head
        return self.keys[a:b], self.times[a:b], self.measures[a:b], self.values[a:b], self.offsets[a:b]

    def _compact(self, most: int) -> None:
        """Drop the taken records once there are more than ``most`` of them."""
        h = self.head
        if h > most:
            self.keys, self.times, self.measures = self.keys[h:], self.times[h:], self.measures[h:]
            self.values, self.offsets, self._ts = self.values[h:], self.offsets[h:], self._ts[h:]
            self.head = 0


def partition_runs(parts: list[int]) -> list[tuple[int, int]]:
    """The stretches ``[a, b)`` of a batch from one partition each (a batch is a few of them)."""
    n = len(parts)
    if n == 0:
        return []
    if parts.count(parts[0]) == n:  # the usual batch under a backlog: one partition's fetch
        return [(0, n)]
    arr = np.fromiter(parts, dtype=np.int64, count=n)
    edges = [0, *(np.flatnonzero(np.diff(arr)) + 1).tolist(), n]
    return list(zip(edges[:-1], edges[1:], strict=True))


def extend(out: Extracted, h: Held, a: int, b: int, p: int) -> None:
    keys, times, measures, values, offsets = h.records(a, b)
    out.keys += keys
    out.times += times
    out.measures += measures
    out.values += values
    out.partitions += [p] * (b - a)
    out.offsets += offsets


def first_offsets(ext: Extracted) -> dict[int, int]:
    """The lowest offset per partition of a batch's records (good and bad)."""
    first: dict[int, int] = {}
    for p, o in zip(ext.partitions, ext.offsets, strict=True):
        if o < first.get(p, o + 1):
            first[p] = o
    for b in ext.bad:
        p, o = b.message.partition() or 0, b.message.offset() or 0
        if o < first.get(p, o + 1):
            first[p] = o
    return first
