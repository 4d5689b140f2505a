"""Dalton's per-key slots: where each remembered key's state lives, and how slots are given out and recycled.

Every key the partitioner currently remembers (in the sliding window, in the statistics window, in the
Q-table) gets a dense integer slot, so per-key state lives in numpy arrays indexed by slot (the window's
fragmentation, the statistics, the sync counts, the key's candidate combiners) and a batch's keys are updated
with one vectorised operation. :class:`SlotTable` maps key ids to slots. :class:`KeySlots` (a mixin of the
partitioner) gives new keys a slot, recycles the slots of keys no state refers to any more (a collection that
runs only when the table is full: amortised O(1) per key) and grows every per-key array together.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import compile_loop
from router.partitioners.dalton.bandit import QTable
from router.partitioners.dalton.stats import FrequencyStats
from router.partitioners.dalton.window import SlidingState

__all__ = ["KeySlots", "SlotTable", "find_slots", "find_slots_py"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]

_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)


def find_slots_py(cells: U64, mask: np.uint64, table_ids: U64, ids: U64) -> IntP:
    """:meth:`SlotTable.find` in one loop: linear probing from each id's home cell to its cell or an empty one."""
    out = np.empty(ids.shape[0], np.intp)
    for j in range(ids.shape[0]):
        x = ids[j]
        pos = x & mask
        while True:
            cell = cells[pos]
            if cell == 0:
                out[j] = -1
                break
            v = np.intp(cell & _LOW) - 1
            if table_ids[v] == x:
                out[j] = v
                break
            pos = (pos + np.uint64(1)) & mask
    return out


find_slots = compile_loop(find_slots_py)


class SlotTable:
    """Maps 64-bit key ids to dense slots ``[0, capacity)``, with recycling.

    The map is a numpy open-addressing hash table (linear probing, at most 1/4 full; key ids are already
    murmur3 hashes, so their low bits are the home position): a batch's ids are looked up and inserted
    with a few vectorised probe rounds (insertion) or one compiled loop (lookup). Releasing slots rebuilds the
    table.
    """

    def __init__(self, capacity: int = 1024) -> None:
        self.ids: U64 = np.zeros(capacity, dtype=np.uint64)
        self.used: Bools = np.zeros(capacity, dtype=bool)
        self.free: list[int] = list(range(capacity - 1, -1, -1))
        self._new_table(capacity)

    def _new_table(self, capacity: int) -> None:
        size = 1 << max(4, (2 * capacity - 1).bit_length())
        self._mask = np.uint64(size - 1)
        #: cell = (high 32 bits of the key id) << 32 | (slot + 1); 0 marks an empty cell. 8 bytes per cell
        #: keep the table small (cache); a fingerprint match is confirmed against ``ids[slot]``.
        self._cells: U64 = np.zeros(size, dtype=np.uint64)

    @property
    def capacity(self) -> int:
        """Number of slots (used or free)."""
        return int(self.used.shape[0])

    def __len__(self) -> int:
        return self.capacity - len(self.free)

    def find(self, ids: U64) -> IntP:
        """Slot of each id, ``-1`` for ids without one."""
        return find_slots(self._cells, self._mask, self.ids, ids)

    def slot(self, key: int) -> int:
        """Slot of one key id, ``-1`` if it has none."""
        return int(self.find(np.asarray([key], dtype=np.uint64))[0])

    def _place(self, ids: U64, slots: IntP) -> None:
        mask = int(self._mask)
        pos = (ids & self._mask).astype(np.intp)
        mine_all = ((ids >> _SHIFT) << _SHIFT) | (slots.astype(np.uint64) + np.uint64(1))
        while ids.size:
            empty = self._cells[pos] == 0
            cells, mine = pos[empty], mine_all[empty]
            self._cells[cells] = mine  # ids racing for one cell: the last write wins ...
            won = self._cells[cells] == mine  # ... and the others probe on
            rest = np.ones(ids.shape[0], dtype=bool)
            rest[np.flatnonzero(empty)[won]] = False
            ids, mine_all = ids[rest], mine_all[rest]
            pos = (pos[rest] + 1) & mask

    def insert(self, ids: U64) -> IntP:
        """Give each (new, distinct) id a free slot; the caller ensures ``len(free) >= len(ids)``."""
        k = int(ids.shape[0])
        out = np.asarray(self.free[len(self.free) - k :][::-1], dtype=np.intp)
        del self.free[len(self.free) - k :]
        self.ids[out] = ids
        self.used[out] = True
        self._place(ids, out)
        return out

    def _rebuild(self) -> None:
        self._new_table(self.capacity)
        live = np.flatnonzero(self.used)
        self._place(self.ids[live], live)

    def release(self, slots: IntP) -> None:
        """Forget the keys of ``slots``."""
        self.used[slots] = False
        self.free.extend(slots.tolist())
        self._rebuild()

    def grow(self, capacity: int) -> None:
        """Enlarge to ``capacity`` slots."""
        old = self.capacity
        if capacity <= old:
            return
        self.ids = np.concatenate([self.ids, np.zeros(capacity - old, dtype=np.uint64)])
        self.used = np.concatenate([self.used, np.zeros(capacity - old, dtype=bool)])
        self.free = list(range(capacity - 1, old - 1, -1)) + self.free
        self._rebuild()


class KeySlots:
    """Slot lifecycle of :class:`~router.partitioners.dalton.DaltonPartitioner` (see the module doc)."""

    n: int
    #: whether keys get two distinct candidates (sticky placement, affinity tail) besides the hash combiner
    two_candidates: bool
    slots: SlotTable
    win: SlidingState
    stats: FrequencyStats
    qtable: QTable
    #: per slot: tuples routed since the last SYNC (cooperative learning)
    sync_counts: I64
    _sync_pending: list[tuple[IntP, I64]]
    #: per slot: the key's hash combiner and its two distinct affinity candidates
    cand: npt.NDArray[np.int16]
    #: per slot: the combiner holding the key whole when it was last routed (-1: none known)
    last_comb: npt.NDArray[np.int16]

    def _slots_for(self, ids: npt.NDArray[np.uint64], hashes: npt.NDArray[np.uint32]) -> IntP:
        slots = self.slots.find(ids)
        miss = slots < 0
        k = int(np.count_nonzero(miss))
        if k:
            if len(self.slots.free) < k:
                self._collect(slots[~miss])
                cap = self.slots.capacity
                if len(self.slots.free) < max(k, cap // 4):
                    self._grow(max(2 * cap, cap + k))
            new = self.slots.insert(ids[miss])
            slots[miss] = new
            h = hashes[miss]
            self.cand[new, 0] = h[:, 0] % np.uint32(self.n)
            if self.two_candidates:  # distinct_candidates(h, n, 2), inlined for small batches
                c1 = h[:, 0] % np.uint32(self.n)
                c2 = h[:, 1] % np.uint32(self.n)
                self.cand[new, 1] = c1
                self.cand[new, 2] = np.where(c2 == c1, (c2 + 1) % self.n, c2) if self.n > 1 else c1
        return slots

    def flush_sync_counts(self) -> None:
        """Add the pending per-segment counts to ``sync_counts`` (before slots change owners, before a SYNC)."""
        if self._sync_pending:
            slots = np.concatenate([s for s, _ in self._sync_pending])
            counts = np.concatenate([c for _, c in self._sync_pending])
            self.sync_counts += np.bincount(slots, weights=counts, minlength=self.sync_counts.shape[0]).astype(np.int64)
            self._sync_pending = []

    def _collect(self, protect: IntP) -> None:
        """Recycle the slots of keys no state refers to any more."""
        self.flush_sync_counts()
        live = self.win.live() | self.stats.live()  # (sync counts of forgotten keys are dropped)
        live[protect] = True
        if self.qtable.rows:
            q = self.slots.find(np.fromiter(self.qtable.rows, dtype=np.uint64, count=len(self.qtable.rows)))
            live[q[q >= 0]] = True
        dead = np.flatnonzero(self.slots.used & ~live)
        if dead.size:
            self.slots.release(dead)
            self.sync_counts[dead] = 0
            self.last_comb[dead] = -1

    def _grow(self, capacity: int) -> None:
        self.flush_sync_counts()
        self.slots.grow(capacity)
        self.win.grow(capacity)
        self.stats.grow(capacity)
        extra = capacity - self.sync_counts.shape[0]
        self.sync_counts = np.concatenate([self.sync_counts, np.zeros(extra, dtype=np.int64)])
        self.cand = np.concatenate([self.cand, np.zeros((extra, 3), dtype=np.int16)])
        self.last_comb = np.concatenate([self.last_comb, np.full(extra, -1, dtype=np.int16)])
