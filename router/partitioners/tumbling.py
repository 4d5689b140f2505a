"""Fast paths of the Holistic partitioners for their default configuration: exact sets, tumbling windows.

**AM and cAM: one *home* combiner per key.**

With exact sets and tumbling windows, AM and cAM put a key into exactly one combiner's set per window (the
candidate its first tuple chose) and send every later tuple of the window there. The whole state is
therefore a map key id -> home, the per-combiner cardinalities ``card`` and tuple counts ``L``.

:class:`WindowHomes` keeps the map as two numpy arrays sorted by key id, so a batch's already-placed keys
are resolved with one ``searchsorted`` and only the keys new to the window go through a Python loop.
The decisions are the ones of the per-key loop over the grouped batch (Alg. 3 and 4 of [Holistic]):

- AM places a new key on the candidate with the lowest ``card``; only new keys change ``card``, so a loop
  over the new keys alone sees the same values (:func:`~router.partitioners.holistic_rules.place_by_cards`).
- cAM places it on the candidate with the lowest ``L``, and ``L`` also grows with every placed key before
  it in the batch: :func:`known_prefix_loads` gives, for each new key and candidate, the tuples the batch's
  already-placed keys sent there before that key.

**CM and LM: one bit mask per key.** A key may sit in several sets, so :class:`KeyMasks` keeps, per key
id, the combiners whose set holds it as the bits of a Python integer (any ``n``). A batch reads its keys'
masks in one pass, runs the rule (:mod:`router.partitioners.holistic_rules`) with :func:`mask_adder` on local
lists and writes the masks back in one pass. With ``n <= 64`` the partitioners run the compiled twins of the
rules (:mod:`router.partitioners.kernels`, numba) on ``uint64`` masks instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat

import numpy as np
import numpy.typing as npt

from router.partitioners.holistic_rules import Add

__all__ = ["KeyMasks", "WindowHomes", "known_prefix_loads", "mask_adder"]

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]


class _TumblingStore:
    """A store of one tumbling window, with ``card[c]`` keys per combiner.

    :meth:`reset` at each window boundary is the only expiry (sliding windows use
    :class:`~router.partitioners.cardinality.ExactSets`).
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.block = 0
        self.reset()

    def reset(self) -> None:
        """Forget every key (a new window)."""
        self.card: list[int] = [0] * self.n

    def expire(self, blocks: Iterable[int]) -> None:
        """Tumbling windows expire by :meth:`reset` only; present for the store interface."""


class WindowHomes(_TumblingStore):
    """Key id -> home combiner for the current tumbling window, as arrays sorted by key id.

    ``card[c]`` is the number of keys whose home is ``c``.
    """

    def reset(self) -> None:
        """Forget every key (a new window)."""
        super().reset()
        self.ids: U64 = np.zeros(0, dtype=np.uint64)
        self.homes: I64 = np.zeros(0, dtype=np.int64)

    def lookup(self, ids: U64) -> I64:
        """Home of every key id, ``-1`` for keys not placed in this window."""
        if self.ids.shape[0] == 0:
            return np.full(ids.shape[0], -1, dtype=np.int64)
        pos = np.searchsorted(self.ids, ids)
        pos[pos == self.ids.shape[0]] = 0
        return np.where(self.ids[pos] == ids, self.homes[pos], -1)

    def insert(self, ids: U64, homes: I64) -> None:
        """Record the homes of keys not yet placed in this window (``card`` is the caller's)."""
        order = np.argsort(ids, kind="stable")
        ids, homes = ids[order], homes[order]
        at = np.searchsorted(self.ids, ids)
        self.ids = np.insert(self.ids, at, ids)
        self.homes = np.insert(self.homes, at, homes)


def known_prefix_loads(homes: I64, counts: I64, new: npt.NDArray[np.intp], cand: I64) -> I64:
    """For new key ``new[i]`` and its candidate ``cand[i, j]``: tuples the batch's placed keys before it sent there.

    ``homes[g]`` is the home of the batch's ``g``-th key (``-1`` if new) and ``counts[g]`` its tuples, in
    grouped order. Sorting the placed keys by (home, position) turns each query into two ``searchsorted``.
    """
    size = homes.shape[0]
    known = np.flatnonzero(homes >= 0)
    if known.shape[0] == 0:
        return np.zeros(cand.shape, dtype=np.int64)
    keys = homes[known] * size + known  # positions are < size: (home, position) in one integer
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    cum = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts[known][order])])
    upto = np.searchsorted(sorted_keys, cand * size + new[:, None])
    start = np.searchsorted(sorted_keys, cand * size)
    return cum[upto] - cum[start]


class KeyMasks(_TumblingStore):
    """Key id -> bit mask of the combiners whose set holds it, for the current tumbling window.

    ``card[c]`` is the number of keys with bit ``c`` set.
    """

    def reset(self) -> None:
        """Empty every set (a new window)."""
        super().reset()
        self.masks: dict[int, int] = {}

    def read(self, ids: list[int]) -> list[int]:
        """The mask of every key id (0 for keys no set holds)."""
        return list(map(self.masks.get, ids, repeat(0)))

    def write(self, ids: list[int], masks: list[int]) -> None:
        """Store the masks of ``ids`` (``card`` is the caller's)."""
        self.masks.update(zip(ids, masks, strict=True))


def mask_adder(masks: list[int], card: list[int]) -> Add:
    """The rules' ``add`` over the batch's key masks: sets bit ``c`` of key ``i`` and counts it in ``card``."""

    def add(i: int, c: int) -> bool:
        m, bit = masks[i], 1 << c
        if m & bit:
            return False
        masks[i] = m | bit
        card[c] += 1
        return True

    return add
