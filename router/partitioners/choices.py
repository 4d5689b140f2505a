"""D-Choices and W-Choices (Nasir et al., ICDE 2016, "When Two Choices Are Not Enough"; FISH's baselines).

Both find heavy hitters with a space-saving counter over the whole stream (:mod:`.spacesaving`, ``k_max``
counters, no decay): a key is a heavy hitter when its estimated share of the tuples seen so far exceeds
``theta`` (default ``1 / (5 n)``). The counts are updated with a segment's keys before the segment is routed
(a look-ahead of one batch, as in FISH here). Every other key uses PKG's two distinct hash candidates.

- **W-Choices**: a heavy hitter may go to any of the ``n`` combiners (the least loaded).
- **D-Choices**: a heavy hitter gets ``d`` candidates, the same ``d`` for all heavy hitters, derived from
  their estimated shares ``p_1 >= p_2 >= ...`` (``h`` of them): the smallest ``d >= 2`` for which the top
  key spread over ``d`` candidates is within the mean load (``p_1 / d <= 1 / n``) and the heavy hitters'
  total share fits on the combiners their candidates are expected to cover (``sum p <= 1 - (1 - d/n)^h``),
  capped at ``n``. (The paper derives ``d`` from the heavy hitters' frequencies and the load bound; this is
  our statement of it.)

A heavy hitter's candidates are the first ``d`` combiners of a permutation of ``0..n-1`` seeded by the key's
hash (the same on every router), cached per key. Decisions: the local load estimate (tuples this router
sent: cumulative, or reset per tumbling ``window`` with ``load="windowed"``); a key's tuples of one batch go
one by one to its least loaded candidate (ties: the earlier candidate), which is water-filling per key.
Within a batch the PKG keys are decided first (key-grouped order, :mod:`.windows`), then the heavy hitters,
so the most flexible keys level what the others left.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from router.partitioners.pkg import PKGPartitioner, greedy_fill
from router.partitioners.spacesaving import SpaceSaving
from router.partitioners.windows import I64, U64
from schemas.partitioner_settings import HeavyChoicesSettings

__all__ = ["DChoicesPartitioner", "WChoicesPartitioner", "choices_for"]

#: Defaults (and, through ``create``, bounds) of every parameter (the same for both variants).
_DEFAULTS = HeavyChoicesSettings(name="dchoices")


def choices_for(shares: list[float], n: int) -> int:
    """D-Choices' ``d`` for heavy hitters with estimated shares ``shares`` (see the module doc)."""
    if not shares or n <= 2:
        return min(2, n)
    top, total, h = max(shares), sum(shares), len(shares)
    for d in range(2, n + 1):
        if top / d <= 1.0 / n and total <= 1.0 - (1.0 - d / n) ** h:
            return d
    return n


class _HeavyChoices(PKGPartitioner):
    """PKG for every key but the heavy hitters, which get ``_width()`` candidates."""

    wide: ClassVar[bool] = False

    def __init__(
        self, n: int, *, theta: float | None = _DEFAULTS.theta, k_max: int = _DEFAULTS.k_max, **kw: Any
    ) -> None:
        kw.pop("d", None)
        super().__init__(n, d=2, **kw)
        self._params.pop("d", None)
        self._params.update(theta=theta, k_max=int(k_max))
        self.theta = 1.0 / (5 * self.n) if theta is None else float(theta)
        self.counter = SpaceSaving(int(k_max))
        self.width = min(2, self.n)  # candidates of a heavy hitter (D-Choices' d; n for W-Choices)
        self._perm: dict[int, list[int]] = {}

    def heavy_hitters(self) -> dict[int, float]:
        """Tracked key ids whose estimated share exceeds ``theta``, with that share."""
        ss = self.counter
        if ss.mass <= 0:
            return {}
        share = ss.cnt[: ss.used] / ss.mass
        hot = np.flatnonzero(share > self.theta)
        return dict(zip(ss.ids[hot].tolist(), share[hot].tolist(), strict=True))

    def _width(self, shares: list[float]) -> int:
        return self.n if self.wide else choices_for(shares, self.n)

    def _candidates(self, key: int, first: list[int], d: int) -> list[int]:
        """A heavy hitter's ``d`` candidates: its two PKG candidates, then its own permutation of the rest."""
        perm = self._perm.get(key)
        if perm is None:
            rng = np.random.default_rng([key & 0xFFFFFFFF, key >> 32, self.hash_seed & 0xFFFFFFFF])
            rest = [int(c) for c in rng.permutation(self.n) if c not in first]
            perm = self._perm[key] = [*first, *rest]
            if len(self._perm) > 4 * self.counter.capacity:  # forget keys no longer heavy (rebuilt on demand)
                self._perm = {key: perm}
        return perm[:d]

    def _decide(self, ids: U64, cand: I64, counts: I64) -> npt.ArrayLike:
        slots, _ = self.counter.add(ids, counts)
        ss = self.counter
        share = ss.counts(slots) / ss.mass if ss.mass > 0 else np.zeros(ids.shape[0])
        heavy = share > self.theta
        if not heavy.any():
            return super()._decide(ids, cand, counts)
        hh = self.heavy_hitters()
        self.width = d = self._width(list(hh.values()))
        seq = np.empty(int(counts.sum()), dtype=np.int64)
        owner = np.repeat(heavy, counts)
        light = np.flatnonzero(~heavy)
        if light.size:
            seq[~owner] = super()._decide(ids[light], cand[light], counts[light])
        firsts = cand[heavy].tolist()
        rows = [self._candidates(key, firsts[g], d) for g, key in enumerate(ids[heavy].tolist())]
        seq[owner] = greedy_fill(rows, counts[heavy].tolist(), self.loads)
        return seq


class DChoicesPartitioner(_HeavyChoices):
    """D-Choices: heavy hitters over ``d`` candidates (``d`` derived from their shares), the rest PKG.

    Parameters: ``theta`` heavy-hitter share (default ``1/(5n)``), ``k_max`` counters, ``load`` as PKG.
    """

    name = "dchoices"


class WChoicesPartitioner(_HeavyChoices):
    """W-Choices: heavy hitters to the least loaded of all ``n`` combiners, the rest PKG.

    Parameters: ``theta`` heavy-hitter share (default ``1/(5n)``), ``k_max`` counters, ``load`` as PKG.
    """

    name = "wchoices"
    wide = True
