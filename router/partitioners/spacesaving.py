"""A batched space-saving counter (Metwally et al.): the top-``capacity`` keys of a stream, with decay.

Shared by FISH (epoch decay) and D-/W-Choices (no decay: counts since the stream started).

Per-tuple rule: a tracked key adds 1; a new key takes a free slot with count 1, or replaces the key with the
smallest count and gets ``min + 1`` (estimates never undercount). Batched, per segment of distinct keys with
counts ``c``: a tracked key adds ``c``; newcomers take free slots with ``c``, then replace the smallest
counters among the keys *not* seen in this segment, all at once (``victim + c``; which newcomer inherits which
of those counters is left to ``argpartition``), so a newcomer never evicts another key of the same segment.
If a segment has more newcomers than evictable slots, those with the largest counts are tracked, the rest
stay untracked for this segment.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["SpaceSaving"]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]


class SpaceSaving:
    """Counters for at most ``capacity`` key ids (uint64); ``mass`` is the (decayed) tuple count."""

    def __init__(self, capacity: int) -> None:
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        self.capacity = int(capacity)
        self.ids = np.zeros(self.capacity, dtype=np.uint64)
        self.cnt = np.zeros(self.capacity, dtype=np.float64)
        self.used = 0  # slots [0, used) are occupied
        # Lookup index: sorted ``(id with its low bits replaced by the slot)``; a hit is confirmed on the full
        # id (two tracked ids equal but for their low bits, p ~ 2^-44 per pair, would leave one unfound).
        self.slot_mask = np.uint64((1 << max(1, (self.capacity - 1).bit_length())) - 1)
        self.index = np.zeros(0, dtype=np.uint64)
        self.mass = 0.0

    def lookup(self, ids: U64) -> I64:
        """Slot of each id (-1 when untracked)."""
        slots = np.full(ids.shape[0], -1, dtype=np.int64)
        if self.used:
            high = ids & ~self.slot_mask
            found = self.index[np.minimum(np.searchsorted(self.index, high), self.used - 1)]
            slot = (found & self.slot_mask).astype(np.int64)
            hit = ((found & ~self.slot_mask) == high) & (self.ids[slot] == ids)
            slots[hit] = slot[hit]
        return slots

    def add(self, ids: U64, cnt: I64) -> tuple[I64, I64]:
        """Add a segment's distinct ids with their counts.

        Returns each id's slot (-1: untracked) and the slots that changed owner (new keys placed).
        """
        slots = self.lookup(ids)
        found = slots >= 0
        self.cnt[slots[found]] += cnt[found]
        placed = np.zeros(0, dtype=np.int64)
        new = np.flatnonzero(~found)
        if new.size:
            used = self.used
            free = new[: self.capacity - used]
            fresh = np.arange(used, used + free.size)
            self.ids[fresh] = ids[free]
            self.cnt[fresh] = cnt[free]
            slots[free] = fresh
            self.used = used + free.size
            placed = fresh
            rest = new[free.size :]
            if rest.size:
                touched = np.zeros(self.capacity, dtype=bool)
                touched[slots[slots >= 0]] = True
                evictable = np.flatnonzero(~touched)
                if rest.size > evictable.size:
                    keep = np.argsort(-cnt[rest], kind="stable")[: evictable.size]
                    rest = rest[np.sort(keep)]
                if rest.size < evictable.size:  # the smallest counters (any order among them)
                    evictable = evictable[np.argpartition(self.cnt[evictable], rest.size - 1)[: rest.size]]
                self.ids[evictable] = ids[rest]
                self.cnt[evictable] += cnt[rest]
                slots[rest] = evictable
                placed = np.concatenate([fresh, evictable])
            used_slots = np.arange(self.used, dtype=np.uint64)
            self.index = np.sort((self.ids[: self.used] & ~self.slot_mask) | used_slots)
        self.mass += float(cnt.sum())
        return slots, placed

    def decay(self, alpha: float) -> None:
        """Multiply every counter and the mass by ``alpha``."""
        self.cnt[: self.used] *= alpha
        self.mass *= alpha

    def counts(self, slots: I64) -> npt.NDArray[np.float64]:
        """The counts of ``slots`` (0 for -1)."""
        return np.where(slots >= 0, self.cnt[np.maximum(slots, 0)], 0.0)

    def top(self) -> float:
        """The largest count (0 when empty)."""
        return float(self.cnt[: self.used].max()) if self.used else 0.0
