"""Dalton's per-key slots and sliding-window state (load vector and fragmentation), Sec. 3.3.

**Slots.** Every key the partitioner currently remembers (in the sliding window, in the statistics
window, in the Q-table) gets a dense integer slot, so per-key state lives in numpy arrays and a batch's
keys are updated with one vectorised operation. The only per-key Python work is the id -> slot lookup of
a batch's distinct keys (one dict lookup each). Slots of keys nobody remembers any more are recycled by a
collection that runs only when the table is full (amortised O(1) per key).

**Sliding window.** A ring of ``ceil(W / s)`` blocks, one per slide; the newest block is the head. Each
block keeps its load vector and the distinct ``(key, combiner)`` pairs routed in it. The aggregate keeps
a reference count per ``(slot, combiner)``: in how many blocks of the window (head included) the key
reached that combiner. When a block expires its pairs are decremented, and a count reaching zero clears
the fragmentation bit -- the bug of the reference code (bits that never expire) is not reproduced: a key
that stayed on one combiner for a full window has fragmentation 1 again. ``head`` marks the pairs of the
head block alone, i.e. the fragmentation of the current slide (micro-batch mode, Sec. 3.4).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["SlidingState", "SlotTable"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]


_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)
_PROBE = 8
_OFFSETS = np.arange(1, _PROBE + 1, dtype=np.intp)


class SlotTable:
    """Maps 64-bit key ids to dense slots ``[0, capacity)``, with recycling.

    The map is a numpy open-addressing hash table (linear probing, at most 1/4 full; key ids are already
    murmur3 hashes, so their low bits are the home position): a batch's ids are looked up and inserted
    with a few vectorised probe rounds, no Python loop per key. Releasing slots rebuilds the table.
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
        mask = int(self._mask)
        pos = (ids & self._mask).astype(np.intp)
        cell = self._cells[pos]
        v = (cell & _LOW).astype(np.intp) - 1
        hit = (cell >> _SHIFT) == (ids >> _SHIFT)
        hit[hit] = self.ids[v[hit]] == ids[hit]  # confirm the fingerprint
        out = np.where(hit, v, -1)
        more = np.flatnonzero(~hit & (v >= 0))  # home cell taken by another key: probe on (few keys)
        while more.size:  # the next _PROBE cells at once
            cells = self._cells[(pos[more, None] + _OFFSETS) & mask]
            tv = (cells & _LOW).astype(np.intp) - 1
            match = (tv >= 0) & (self.ids[tv] == ids[more, None])
            found = match.any(axis=1)
            out[more[found]] = tv[found, match[found].argmax(axis=1)]
            go_on = ~found & (tv >= 0).all(axis=1)  # no match and no empty cell yet
            more = more[go_on]
            pos[more] += _PROBE
        return out

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


class SlidingState:
    """Load vector and fragmentation over a sliding window of ``blocks`` slides (see the module doc)."""

    def __init__(self, n: int, blocks: int, capacity: int) -> None:
        self.n = n
        self.blocks = blocks
        self.block = -1  # index (time // slide) of the head block; -1 before the first tuple
        self.pos = 0  # ring position of the head
        self.loads: I64 = np.zeros((blocks, n), dtype=np.int64)
        self.window_load: I64 = np.zeros(n, dtype=np.int64)
        #: per block, its distinct (key, combiner) pairs as flat indices ``slot * n + combiner``
        self.pairs: list[IntP] = [np.zeros(0, dtype=np.intp) for _ in range(blocks)]
        self._head_pairs: list[IntP] = []
        #: blocks holding each (slot, combiner); the narrowest type that counts to ``blocks`` (cache)
        self._rtype = np.uint8 if blocks < 255 else np.uint16 if blocks < 65535 else np.uint32
        self.refcount: npt.NDArray[np.unsignedinteger] = np.zeros((capacity, n), dtype=self._rtype)
        self.head: Bools = np.zeros((capacity, n), dtype=bool)

    # -- capacity ------------------------------------------------------------------------------
    def grow(self, capacity: int) -> None:
        """Enlarge the per-slot arrays to ``capacity`` rows."""
        extra = capacity - self.refcount.shape[0]
        if extra > 0:
            self.refcount = np.concatenate([self.refcount, np.zeros((extra, self.n), self._rtype)])
            self.head = np.concatenate([self.head, np.zeros((extra, self.n), bool)])

    def live(self) -> Bools:
        """Slots the window still references."""
        return np.asarray(self.refcount.any(axis=1), dtype=bool)

    # -- time ----------------------------------------------------------------------------------
    def advance(self, block: int) -> list[I64]:
        """Move the head to block index ``block``; returns the load vectors of the blocks closed."""
        if self.block < 0:
            self.block = block
            return []
        steps = block - self.block
        closed: list[I64] = []
        for _ in range(min(max(steps, 0), self.blocks)):
            closed.append(self.loads[self.pos].copy())
            self._roll()
        if steps > 0:
            self.block = block
        return closed

    def _roll(self) -> None:
        head = np.concatenate(self._head_pairs) if self._head_pairs else np.zeros(0, dtype=np.intp)
        self.head.reshape(-1)[head] = False
        self.pairs[self.pos] = head
        self._head_pairs = []
        self.pos = (self.pos + 1) % self.blocks
        old = self.pairs[self.pos]
        if old.size:
            self.refcount.reshape(-1)[old] -= 1  # pairs are distinct within a block
        self.window_load -= self.loads[self.pos]
        self.loads[self.pos] = 0
        self.pairs[self.pos] = np.zeros(0, dtype=np.intp)

    # -- updates and queries -------------------------------------------------------------------
    def add(self, slots: IntP, combs: IntP, weights: I64) -> None:
        """Record ``weights[i]`` tuples of slot ``slots[i]`` routed to ``combs[i]`` in the head block.

        The ``(slot, combiner)`` pairs must be distinct.
        """
        load = np.bincount(combs, weights=weights, minlength=self.n).astype(np.int64)
        self.loads[self.pos] += load
        self.window_load += load
        flat = slots * self.n + combs
        head = self.head.reshape(-1)
        if self._head_pairs:  # pairs already in this slide are not new (a fresh slide skips the test)
            flat = flat[~head[flat]]
            if flat.size == 0:
                return
        head[flat] = True
        self.refcount.reshape(-1)[flat] += 1
        self._head_pairs.append(flat)

    @property
    def head_empty(self) -> bool:
        """Whether no pair was routed in the current slide yet."""
        return not self._head_pairs

    @property
    def head_load(self) -> I64:
        """Load vector of the head block (the current slide)."""
        return self.loads[self.pos]

    def fragmentation(self, slots: IntP, scope: str = "window") -> I64:
        """Combiners each key reached in the window (``scope="window"``) or in the current slide."""
        bits = self.head[slots] if scope == "slide" else self.refcount[slots] > 0
        return bits.sum(axis=1).astype(np.int64)

    def held(self, slots: IntP, combs: IntP, scope: str = "window") -> Bools:
        """Whether combiner ``combs[i]`` holds key ``slots[i]`` in the window or the current slide."""
        if scope == "slide":
            return self.head[slots, combs]
        return self.refcount[slots, combs] > 0

    def bits(self, slot: int, scope: str = "window") -> int:
        """Fragmentation bit mask (bit ``c`` set when combiner ``c`` holds the key)."""
        row = self.head[slot] if scope == "slide" else self.refcount[slot] > 0
        return sum(1 << int(i) for i in np.flatnonzero(row))
