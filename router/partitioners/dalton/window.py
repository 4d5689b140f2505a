"""Dalton's sliding-window state (load vector and fragmentation), Sec. 3.3.

Per-key arrays are indexed by the key's slot (:mod:`.slots`).

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

from router.partitioners.accel import compile_loop

__all__ = ["SlidingState", "add_pieces", "add_pieces_py"]

IntP = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


def add_pieces_py(
    load: I64, window_load: I64, head: Bools, refcount: npt.NDArray[np.unsignedinteger], slots: IntP,
    combs: IntP, weights: I64, fresh: bool,
) -> IntP:  # fmt: skip
    """:meth:`SlidingState.add` in one loop: raise the head block's and the window's loads, mark the pairs.

    ``head`` and ``refcount`` are the flat views. Returns the pairs new to the slide (flat indices); with
    ``fresh`` (nothing routed in the slide yet) every pair is.
    """
    n = load.shape[0]
    flat = np.empty(slots.shape[0], np.intp)
    m = 0
    for i in range(slots.shape[0]):
        c = combs[i]
        load[c] += weights[i]
        window_load[c] += weights[i]
        f = slots[i] * n + c
        if fresh or not head[f]:  # pairs already in this slide are not new
            head[f] = True
            refcount[f] += 1
            flat[m] = f
            m += 1
    return flat[:m]


add_pieces = compile_loop(add_pieces_py)


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
        fresh = not self._head_pairs
        flat = add_pieces(
            self.loads[self.pos],
            self.window_load,
            self.head.reshape(-1),
            self.refcount.reshape(-1),
            slots.astype(np.intp, copy=False),
            combs.astype(np.intp, copy=False),
            weights.astype(np.int64, copy=False),
            fresh,
        )
        if flat.size or fresh:
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
