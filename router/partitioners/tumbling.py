"""Fast paths of the Holistic partitioners for their default configuration: exact sets, tumbling windows.

**AM and cAM: one *home* combiner per key.**

With exact sets and tumbling windows, AM and cAM put a key into exactly one combiner's set per window (the
candidate its first tuple chose) and send every later tuple of the window there. The whole state is
therefore a map key id -> home, the per-combiner cardinalities ``card`` and tuple counts ``L``.

:class:`WindowHomes` keeps the map as two numpy arrays sorted by key id, so a batch's already-placed keys
are resolved with one ``searchsorted`` and only the keys new to the window go through a Python loop (a
uniform stream over 10k keys has ~8.6k distinct keys per 20k-tuple batch, most of them already placed).
The decisions are the ones of the per-key loop over the grouped batch (Alg. 3 and 4 of [Holistic]):

- AM places a new key on the candidate with the lowest ``card``; only new keys change ``card``, so a loop
  over the new keys alone sees the same values.
- cAM places it on the candidate with the lowest ``L``, and ``L`` also grows with every placed key before
  it in the batch: :func:`known_prefix_loads` gives, for each new key and candidate, the tuples the batch's
  already-placed keys sent there before that key.

**CM and LM: one bit mask per key.** A key may sit in several sets, so :class:`KeyMasks` keeps, per key
id, the combiners whose set holds it as the bits of a Python integer (any ``n``). A batch reads its keys'
masks in one pass, runs the algorithm's loop on local lists (:func:`cm_loop`, :func:`lm_loop`, the same
arithmetic as the per-tuple pseudo-code) and writes the masks back in one pass. With ``n <= 64`` the
partitioners run the compiled twins of these loops (:mod:`router.partitioners.kernels`, numba).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat

import numpy as np
import numpy.typing as npt

__all__ = ["KeyMasks", "WindowHomes", "cm_loop", "known_prefix_loads", "lm_loop", "place_by_cards", "place_by_loads"]

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


def _columns(cand: I64) -> tuple[list[int], list[int], list[list[int]]]:
    """Candidate columns as lists: the first, the second (the first again when ``d = 1``) and the rest."""
    cols = [cand[:, j].tolist() for j in range(cand.shape[1])]
    return cols[0], cols[1] if len(cols) > 1 else cols[0], cols[2:]


def _fewest(card: list[int], a: int, b: int, rest: list[list[int]], i: int) -> int:
    """Key ``i``'s candidate (``a``, ``b``, then ``rest[j][i]``) with the lowest ``card``; ties to the first."""
    home = b if card[b] < card[a] else a
    if rest:
        best = card[home]
        for col in rest:
            if card[col[i]] < best:
                home, best = col[i], card[col[i]]
    return home


def place_by_cards(card: list[int], cand: I64) -> list[int]:
    """AM: each new key (in order) to its candidate with the lowest ``card`` (ties: first); updates ``card``."""
    first, second, rest = _columns(cand)
    out: list[int] = []
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        home = _fewest(card, a, b, rest, i)
        card[home] += 1
        out.append(home)
    return out


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


def place_by_loads(n: int, cand: I64, loads: I64, counts: list[int]) -> list[int]:
    """cAM: each new key (in order) to its candidate with the lowest tuple count ``L`` (ties: first).

    ``loads[i, j]`` is ``L`` of candidate ``cand[i, j]`` before key ``i`` not counting the new keys of the
    batch (the window's count at the batch start plus :func:`known_prefix_loads`); the tuples of the new
    keys placed so far are added here (``n`` combiners).
    """
    first, second, rest = _columns(cand)
    l_first, l_second, l_rest = _columns(loads)
    extra = [0] * n
    out: list[int] = []
    for i, (a, b, la, lb, c) in enumerate(zip(first, second, l_first, l_second, counts, strict=True)):
        va, vb = la + extra[a], lb + extra[b]
        home, best = (b, vb) if vb < va else (a, va)
        for col, lcol in zip(rest, l_rest, strict=True):
            x = col[i]
            v = lcol[i] + extra[x]
            if v < best:
                home, best = x, v
        extra[home] += c
        out.append(home)
    return out


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


def cm_loop(card: list[int], cand: I64, counts: list[int], masks: list[int]) -> tuple[list[int], list[int]]:
    """CM over grouped keys: each tuple to the candidate with the lowest ``card`` (ties: first).

    A tuple that adds its key to a set changes ``card`` (updated here, as is ``masks``); the key's other
    tuples follow while the choice holds. Returns run-length decisions: combiners and tuples per run.
    """
    first, second, rest = _columns(cand)
    combs: list[int] = []
    lens: list[int] = []
    for i, (a, b, c) in enumerate(zip(first, second, counts, strict=True)):
        m = masks[i]
        while c > 0:  # at most d+1 rounds: |C| only changes when the key is new at a candidate
            home = _fewest(card, a, b, rest, i)
            bit = 1 << home
            if m & bit:
                take = c
            else:
                m |= bit
                card[home] += 1
                take = 1
            combs.append(home)
            lens.append(take)
            c -= take
        masks[i] = m
    return combs, lens


def lm_loop(card: list[int], loads: list[int], p: float, cand: I64, counts: list[int], masks: list[int]) -> list[int]:
    """LM tuple by tuple: the candidate with the lowest ``p·L' + (1-p)·C'`` (min-max normalised; ties: first).

    Updates ``card``, ``loads`` and ``masks``; returns every tuple's combiner in grouped order. The
    normalisation weights are recomputed only when a range changes (same floating-point values).
    """
    first, second, rest = _columns(cand)
    q = 1.0 - p
    lo_l, hi_l, lo_c, hi_c = min(loads), max(loads), min(card), max(card)
    wl = p / (hi_l - lo_l) if hi_l > lo_l else 0.0
    wc = q / (hi_c - lo_c) if hi_c > lo_c else 0.0
    out: list[int] = []
    put = out.append
    for i, (a, b, c) in enumerate(zip(first, second, counts, strict=True)):
        m = masks[i]
        for _ in range(c):
            ha = wl * (loads[a] - lo_l) + wc * (card[a] - lo_c)
            hb = wl * (loads[b] - lo_l) + wc * (card[b] - lo_c)
            if hb < ha:
                home, best = b, hb
            else:
                home, best = a, ha
            if rest:
                for col in rest:
                    x = col[i]
                    h = wl * (loads[x] - lo_l) + wc * (card[x] - lo_c)
                    if h < best:
                        home, best = x, h
            bit = 1 << home
            if not m & bit:  # the key is new in this set: |C| changes, keep its range exact
                m |= bit
                was = card[home]
                card[home] = was + 1
                if was == hi_c:
                    hi_c = was + 1
                if was == lo_c:
                    lo_c = min(card)
                wc = q / (hi_c - lo_c) if hi_c > lo_c else 0.0
            v = loads[home]
            loads[home] = v + 1
            if v == hi_l:
                hi_l = v + 1
                wl = p / (hi_l - lo_l) if hi_l > lo_l else 0.0
            if v == lo_l:
                lo_l = min(loads)
                wl = p / (hi_l - lo_l) if hi_l > lo_l else 0.0
            put(home)
        masks[i] = m
    return out
