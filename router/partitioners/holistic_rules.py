"""The decision rules of the Holistic partitioners, written once (the Python reference of :mod:`.kernels`).

Each rule runs over one batch's keys in grouped order (see :mod:`router.partitioners.windows`): ``cand[i]``
holds key ``i``'s candidates, ``counts[i]`` its tuples in the batch, ``card[c]`` the size of combiner ``c``'s
key set and ``loads[c]`` its tuples in the window. Ties go to the earlier candidate.

CM and LM do not care how the key sets are stored: they call ``add(i, c)``, which puts key ``i`` into combiner
``c``'s set, updates ``card`` and says whether ``card[c]`` changed. The exact tumbling fast path passes an adder
over per-key bit masks (:func:`router.partitioners.tumbling.mask_adder`); sliding windows and HLL sketches pass
their store's ``add`` (:mod:`router.partitioners.cardinality`). :mod:`router.partitioners.kernels` compiles
the same loops for bit masks (``n <= 64``); tests compare the two.

AM and cAM keep one home per key and window, so only a key new to the window is placed:
:func:`place_by_cards` (AM, the fewest keys) and :func:`place_by_loads` (cAM, the fewest tuples). Every
"fewest" is :func:`least`, the one tie rule (the earlier candidate wins).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Add", "cm_loop", "least", "lm_loop", "place_by_cards", "place_by_loads"]

I64 = npt.NDArray[np.int64]

Add = Callable[[int, int], bool]
"""``add(i, c)``: put the batch's key ``i`` into combiner ``c``'s set; ``True`` when ``card[c]`` changed."""


def _columns(cand: I64) -> tuple[list[int], list[int], list[list[int]]]:
    """Candidate columns as lists: the first, the second (the first again when ``d = 1``) and the rest."""
    cols = [cand[:, j].tolist() for j in range(cand.shape[1])]
    return cols[0], cols[1] if len(cols) > 1 else cols[0], cols[2:]


def least(metric: Sequence[Any], row: Sequence[int]) -> int:
    """The candidate of ``row`` (priority order) with the lowest ``metric``; ties to the earlier one."""
    home = row[0]
    best = metric[home]
    for x in row[1:]:
        if metric[x] < best:
            home, best = x, metric[x]
    return home


def cm_loop(card: list[Any], cand: I64, counts: list[int], add: Add) -> tuple[list[int], list[int]]:
    """CM: each tuple to the candidate with the fewest keys.

    A tuple that adds its key to a set changes ``card``; the key's other tuples follow while the choice holds,
    so a key takes at most ``d + 1`` rounds. Returns run-length decisions: combiners and tuples per run.
    """
    combs: list[int] = []
    lens: list[int] = []
    for i, (row, c) in enumerate(zip(cand.tolist(), counts, strict=True)):
        while c > 0:
            home = least(card, row)
            take = 1 if add(i, home) else c
            combs.append(home)
            lens.append(take)
            c -= take
    return combs, lens


def lm_loop(card: list[Any], loads: list[int], p: float, cand: I64, counts: list[int], add: Add) -> list[int]:
    """LM: each tuple to the candidate with the lowest ``p·L' + (1-p)·C'`` (min-max normalised over all ``n``).

    A zero range normalises to 0. Updates ``loads`` (and, through ``add``, ``card``); returns every tuple's
    combiner in grouped order. The ranges are kept exact incrementally and the weights recomputed only when a
    range changes (the same floating-point values as recomputing them for every tuple).
    """
    first, second, rest = _columns(cand)
    q = 1.0 - p
    lo_l, hi_l, lo_c, hi_c = min(loads), max(loads), min(card), max(card)
    wl = p / (hi_l - lo_l) if hi_l > lo_l else 0.0
    wc = q / (hi_c - lo_c) if hi_c > lo_c else 0.0
    out: list[int] = []
    put = out.append
    for i, (a, b, c) in enumerate(zip(first, second, counts, strict=True)):
        for _ in range(c):
            ha = wl * (loads[a] - lo_l) + wc * (card[a] - lo_c)
            hb = wl * (loads[b] - lo_l) + wc * (card[b] - lo_c)
            if hb < ha:
                home, best = b, hb
            else:
                home, best = a, ha
            for col in rest:
                x = col[i]
                h = wl * (loads[x] - lo_l) + wc * (card[x] - lo_c)
                if h < best:
                    home, best = x, h
            was = card[home]
            if add(i, home):  # |C| changed
                now = card[home]
                if now > hi_c:
                    hi_c = now
                elif was == hi_c:
                    hi_c = max(card)
                if was == lo_c or now < lo_c:
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
    return out


def place_by_cards(card: list[int], cand: I64) -> list[int]:
    """AM: each new key (in order) to its candidate with the fewest keys; updates ``card``."""
    out: list[int] = []
    for row in cand.tolist():
        home = least(card, row)
        card[home] += 1
        out.append(home)
    return out


def place_by_loads(n: int, cand: I64, loads: I64, counts: list[int]) -> list[int]:
    """cAM: each new key (in order) to its candidate with the fewest tuples.

    ``loads[i, j]`` is the tuple count of candidate ``cand[i, j]`` before key ``i`` not counting the batch's
    other new keys (the window's count at the batch start plus what the batch's already-placed keys sent there
    before key ``i``); the tuples of the new keys placed so far are added here (``n`` combiners).
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
