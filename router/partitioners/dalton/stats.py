"""Hot-key frequency statistics over tumbling statistics windows (Dalton Sec. 3.3, "Statistics Computation").

A key is hot when its frequency in the current statistics window reaches ``L / n``, ``L`` being the total
load of the previous statistics window (Definition 3.3 with the paper's estimate of ``L``). Before a
previous window exists (and whenever the current window already carries more load than the previous
one) the current load is used instead, so ``L / n`` never drops to zero and at most ``n`` keys can cross
it in one window (Theorem 3.4).

Three ways to count, chosen per statistics window:

- ``exact``: a count per key (slot-indexed numpy array, i.e. a hashmap through the slot table);
- ``countmin``: Apache DataSketches' count-min sketch (bounded memory; estimates never undercount, so
  no heavy hitter is missed; per-key calls make it slower than ``exact`` in Python);
- ``hybrid``: ``exact`` unless the previous statistics window held more than ``exact_limit`` distinct
  keys, then the sketch (the paper's policy: choose from the previous window's statistics).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from datasketches import count_min_sketch

__all__ = ["FrequencyStats", "StatsMode"]

StatsMode = Literal["exact", "countmin", "hybrid"]
IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
#: Seed of the count-min sketch's hashes (fixed: every router estimates the same way).
SKETCH_SEED = 9001


class FrequencyStats:
    """Per-key frequencies in the current statistics window and the previous window's total load."""

    #: Tuples of the current window counted while their key was at or above the own threshold (:meth:`note_hot`),
    #: and their share of the previous window's tuples (-1: no previous window). Class defaults: a snapshot
    #: of a release without them restores with none counted.
    cur_hot = 0
    prev_hot_share = -1.0
    #: The previous window's load of this router alone (``prev_load`` becomes every router's with a GLOBAL).
    prev_own_load = 0
    #: The least count among the previous window's largest keys that held a given share of its tuples (0: not
    #: asked for, see :meth:`advance`).
    prev_mass_count = 0.0

    def __init__(self, n: int, mode: StatsMode, capacity: int, *, exact_limit: int = 1 << 16) -> None:
        if mode not in ("exact", "countmin", "hybrid"):
            raise ValueError(f"statistics must be exact, countmin or hybrid, got {mode!r}")
        self.n = n
        self.mode = mode
        self.exact_limit = exact_limit
        self.index = -1  # current statistics window (time // stats_window)
        self.prev_load = 0
        self.cur_load = 0
        self.prev_distinct = 0
        self.cur_distinct = 0
        self.counts: I64 = np.zeros(capacity, dtype=np.int64)
        self._seen: list[IntP] = []  # slots counted in the current window (to reset them)
        #: the window's first segment, not yet written to ``counts`` (with one batch per statistics window,
        #: the usual case, its frequencies are its counts and the per-key array is never touched)
        self._first: tuple[IntP, I64] | None = None
        self.use_sketch = mode == "countmin"
        self.sketch: Any = self._new_sketch() if self.use_sketch else None

    def _new_sketch(self) -> Any:
        hashes = count_min_sketch.suggest_num_hashes(0.99)
        buckets = count_min_sketch.suggest_num_buckets(0.1 / self.n)  # error well below the L/n threshold
        return count_min_sketch(hashes, buckets, SKETCH_SEED)

    # -- slots ---------------------------------------------------------------------------------
    def grow(self, capacity: int) -> None:
        """Enlarge the per-slot counts."""
        extra = capacity - self.counts.shape[0]
        if extra > 0:
            self.counts = np.concatenate([self.counts, np.zeros(extra, dtype=np.int64)])

    def _flush(self) -> None:
        if self._first is not None:
            slots, counts = self._first
            self.counts[slots] += counts
            self._seen.append(slots)
            self._first = None

    def live(self) -> npt.NDArray[np.bool_]:
        """Slots with a count in the current window."""
        self._flush()
        return self.counts > 0

    # -- windows -------------------------------------------------------------------------------
    def advance(self, index: int, mass: float = 0.0, below: float = 1.0, most: int = 1 << 30) -> bool:
        """Enter statistics window ``index``; returns whether a window closed.

        With ``mass`` (exact counts only), when the closing window's hot share is below ``below``: keep the
        least count among its largest keys that together held ``mass`` of its tuples, and no lower than the
        count of its ``most``-th largest key (``prev_mass_count``).
        """
        if self.index < 0:
            self.index = index
            return False
        if index <= self.index:
            return False
        adjacent = index == self.index + 1
        share = self.cur_hot / self.cur_load if self.cur_load else 0.0
        wanted = adjacent and mass > 0 and share < below
        self.prev_mass_count = self._mass_count(mass, most) if wanted else 0.0
        self.prev_hot_share = share if adjacent and self.cur_load else -1.0
        self.cur_hot = 0
        self.prev_load = self.prev_own_load = self.cur_load if adjacent else 0
        self.prev_distinct = self.cur_distinct if adjacent else 0
        self.cur_load = self.cur_distinct = 0
        self._first = None
        if self._seen:
            self.counts[np.concatenate(self._seen)] = 0
            self._seen = []
        if self.mode == "hybrid":
            self.use_sketch = self.prev_distinct > self.exact_limit
        self.sketch = self._new_sketch() if self.use_sketch else None
        self.index = index
        return True

    def observe(self, slots: IntP, ids: U64, counts: I64, total: int | None = None) -> I64:
        """Count a segment's distinct keys (``counts`` tuples each, ``total`` in all); returns their frequencies."""
        fresh = self.cur_load == 0
        self.cur_load += int(counts.sum()) if total is None else total
        if not self.use_sketch:
            if fresh:  # the window's first segment: frequencies are the counts
                self._first = (slots, counts)
                self.cur_distinct += int(slots.shape[0])
                return counts
            self._flush()
            freq = self.counts[slots] + counts
            self.counts[slots] = freq
            self._seen.append(slots)
            if self.mode == "hybrid":
                self.cur_distinct += int(np.count_nonzero(freq == counts))  # keys new in this window
            return freq
        self.cur_distinct += int(ids.shape[0])  # upper bound: keys may repeat across segments
        update, estimate = self.sketch.update, self.sketch.get_estimate
        out = []
        for k, c in zip(ids.view(np.int64).tolist(), counts.tolist(), strict=True):
            update(k, float(c))
            out.append(estimate(k))
        return np.asarray(out, dtype=np.float64).astype(np.int64)

    def threshold(self) -> float:
        """Hot-key threshold ``L / n`` (``L``: previous window's load, or the current one if larger)."""
        return max(self.prev_load, self.cur_load) / self.n

    def _mass_count(self, mass: float, most: int) -> float:
        """The least count among the window's largest keys (``most`` at most) holding ``mass`` of it (0: unknown)."""
        if self.use_sketch or self.cur_load <= 0:
            return 0.0
        if self._first is not None:
            counts = self._first[1]
        elif self._seen:
            counts = self.counts[np.unique(np.concatenate(self._seen))]
        else:
            return 0.0
        top = np.sort(counts)[::-1]
        j = int(np.searchsorted(np.cumsum(top), mass * self.cur_load))
        return float(top[min(j, most - 1, top.shape[0] - 1)])

    def own_threshold(self) -> float:
        """:meth:`threshold` on this router's own load (a GLOBAL's load leaves it alone)."""
        return max(self.prev_own_load, self.cur_load) / self.n

    def note_hot(self, tuples: int) -> None:
        """Count ``tuples`` of the current window whose keys were at or above :meth:`own_threshold` when counted."""
        self.cur_hot += tuples

    def hot_share(self) -> float:
        """Share of the previous window's tuples noted hot (the current window's so far when there is none)."""
        if self.prev_hot_share >= 0:
            return self.prev_hot_share
        return self.cur_hot / self.cur_load if self.cur_load else 0.0

    # -- pickling (DataSketches objects do not pickle) ---------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        self._flush()
        state = dict(vars(self))
        if self.sketch is not None:
            state["sketch"] = bytes(self.sketch.serialize())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("sketch") is not None:
            state = {**state, "sketch": count_min_sketch.deserialize(state["sketch"])}
        self.__dict__.update(state)
