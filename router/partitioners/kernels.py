"""Compiled (numba) twins of the rules of :mod:`router.partitioners.holistic_rules` (CM, LM, AM, cAM).

Same arithmetic in the same order as :func:`~router.partitioners.holistic_rules.cm_loop`,
:func:`~router.partitioners.holistic_rules.lm_loop`, :func:`~router.partitioners.holistic_rules.place_by_cards`
and :func:`~router.partitioners.holistic_rules.place_by_loads` (numba compiles without fast-math, so the
floating-point comparisons of LM give the same decisions; tests compare both). CM and LM run on the exact
tumbling store's key masks, ``uint64`` here, so they serve ``n <= 64`` combiners (AM and cAM any ``n``); the
Python rules serve the rest, the other stores and any machine without numba.

Compiled on first use and cached next to this file (``cache=True``); loaded through
:func:`router.partitioners.accel.holistic_kernels`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["am_kernel", "cam_kernel", "cm_kernel", "least_card", "lm_kernel", "warm"]


@njit(cache=True)
def least_card(card, cand, i):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """The candidate of key ``i`` with the lowest ``card`` (ties: the earlier candidate); twin of ``least``."""
    home = cand[i, 0]
    best = card[home]
    for j in range(1, cand.shape[1]):
        x = cand[i, j]
        if card[x] < best:
            home = x
            best = card[x]
    return home


@njit(cache=True)
def cm_kernel(card, cand, counts, masks, runs, lens):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """CM over grouped keys; writes run-length decisions into ``runs``/``lens``, returns how many."""
    r = 0
    for i in range(cand.shape[0]):
        m = masks[i]
        c = counts[i]
        while c > 0:
            home = least_card(card, cand, i)
            bit = np.uint64(1) << np.uint64(home)
            if m & bit:
                take = c
            else:
                m |= bit
                card[home] += 1
                take = 1
            runs[r] = home
            lens[r] = take
            r += 1
            c -= take
        masks[i] = m
    return r


@njit(cache=True)
def lm_kernel(card, loads, p, cand, counts, masks, out):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """LM tuple by tuple; writes every tuple's combiner into ``out`` (grouped order)."""
    q = 1.0 - p
    lo_l, hi_l, lo_c, hi_c = loads.min(), loads.max(), card.min(), card.max()
    wl = p / (hi_l - lo_l) if hi_l > lo_l else 0.0
    wc = q / (hi_c - lo_c) if hi_c > lo_c else 0.0
    d = cand.shape[1]
    t = 0
    for i in range(cand.shape[0]):
        m = masks[i]
        for _ in range(counts[i]):
            home = cand[i, 0]
            best = wl * (loads[home] - lo_l) + wc * (card[home] - lo_c)
            for j in range(1, d):
                x = cand[i, j]
                h = wl * (loads[x] - lo_l) + wc * (card[x] - lo_c)
                if h < best:
                    home = x
                    best = h
            bit = np.uint64(1) << np.uint64(home)
            if (m & bit) == 0:  # the key is new in this set: |C| changes, keep its range exact
                m |= bit
                was = card[home]
                card[home] = was + 1
                if was == hi_c:
                    hi_c = was + 1
                if was == lo_c:
                    lo_c = card.min()
                wc = q / (hi_c - lo_c) if hi_c > lo_c else 0.0
            v = loads[home]
            loads[home] = v + 1
            if v == hi_l:
                hi_l = v + 1
                wl = p / (hi_l - lo_l) if hi_l > lo_l else 0.0
            if v == lo_l:
                lo_l = loads.min()
                wl = p / (hi_l - lo_l) if hi_l > lo_l else 0.0
            out[t] = home
            t += 1
        masks[i] = m
    return t


@njit(cache=True)
def am_kernel(card, cand, out):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """AM: each new key to its candidate with the fewest keys (ties: the first); counts it in ``card``."""
    for i in range(cand.shape[0]):
        home = least_card(card, cand, i)
        card[home] += 1
        out[i] = home


@njit(cache=True)
def cam_kernel(n, cand, loads, counts, out):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """cAM: each new key to its candidate with the fewest tuples (``loads[i, j]`` + earlier new keys' tuples)."""
    extra = np.zeros(n, np.int64)
    d = cand.shape[1]
    for i in range(cand.shape[0]):
        home = cand[i, 0]
        best = loads[i, 0] + extra[home]
        for j in range(1, d):
            x = cand[i, j]
            v = loads[i, j] + extra[x]
            if v < best:
                home = x
                best = v
        extra[home] += counts[i]
        out[i] = home


def warm() -> None:
    """Compile (or load from the cache) every kernel for the array types the partitioners pass."""
    i64, u64 = np.zeros(0, np.int64), np.zeros(0, np.uint64)
    cand = np.zeros((0, 2), np.int64)
    cm_kernel(np.zeros(1, np.int64), cand, i64, u64, i64, i64)
    lm_kernel(np.zeros(1, np.int64), np.zeros(1, np.int64), 0.5, cand, i64, u64, i64)
    am_kernel(np.zeros(1, np.int64), cand, i64)
    cam_kernel(1, cand, cand, i64, i64)
