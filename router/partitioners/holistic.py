"""The Holistic partitioners ([Holistic] (docs/partitioners.md)): CM, AM, cAM and LM.

Every key has ``d`` distinct hash candidates (as PKG). Per window and per combiner the router keeps a
tuple count ``L`` and a distinct-key set ``C`` (exact, or an HLL sketch with ``cardinality="hll"``):

- **CM** (Alg. 2): the candidate with the lower cardinality ``|C|``;
- **AM** (Alg. 3): a candidate whose ``C`` already holds the key (first one), else the lower ``|C|``;
- **cAM** (Alg. 4): a candidate whose ``C`` already holds the key, else the lower tuple count ``L``;
- **LM** (Alg. 5): the lower hybrid load ``p·L' + (1-p)·C'``, ``L'`` and ``C'`` min-max normalised over
  all ``n`` combiners (Eq. 7-9; a zero range normalises to 0), ``p = 0.5``.

Ties go to the first candidate. ``L`` and ``C`` count only what this router sent, and reset at each
tumbling window boundary (``windowing="tumbling"``, window = the ``window`` argument, in the unit of
``times``). ``windowing="sliding"`` keeps the last ``ceil(window / slide)`` blocks of ``slide`` instead
(with HLL: one sketch per block, the window's sketch rebuilt as their union at each slide).

Batches are decided in key-grouped order (see :mod:`router.partitioners.windows`): a key's tuples of
one batch are taken one after another, so under AM and cAM all of them follow the key's first tuple to
one combiner, and ``L`` grows by the key's batch count at its first appearance.

The rules themselves are written once, in :mod:`router.partitioners.holistic_rules` (compiled twins in
:mod:`router.partitioners.kernels`). What differs by configuration is the store: the default (exact sets,
tumbling windows) keeps one home per key (AM, cAM) or one bit mask per key (CM, LM) for the current window
(:mod:`router.partitioners.tumbling`); sliding windows and HLL keep per-combiner sets
(:mod:`router.partitioners.cardinality`).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import holistic_kernels
from router.partitioners.cardinality import ExactSets, HllSets
from router.partitioners.holistic_rules import Add, cm_loop, least, lm_loop, place_by_cards, place_by_loads
from router.partitioners.tumbling import KeyMasks, WindowHomes, known_prefix_loads, mask_adder
from router.partitioners.windows import I64, U64, GroupedPartitioner
from schemas.partitioner_settings import HolisticSettings

__all__ = ["AMPartitioner", "CAMPartitioner", "CMPartitioner", "HolisticPartitioner", "LMPartitioner"]

#: Key masks are uint64 in the compiled loops.
COMPILED_MAX_N = 64


Cardinality = Literal["exact", "hll"]
Windowing = Literal["tumbling", "sliding"]
#: Defaults (and, through ``create``, bounds) of every parameter (the same for the four rules).
_DEFAULTS = HolisticSettings(name="lm")


class HolisticPartitioner(GroupedPartitioner):
    """Shared state and windowing of CM, AM, cAM and LM.

    Parameters: ``d`` candidates (capped at ``n``), ``cardinality`` ``"exact"`` or ``"hll"``, ``windowing``
    ``"tumbling"`` or ``"sliding"``; defaults and bounds: :class:`~schemas.partitioner_settings.HolisticSettings`.
    Guarantees: every tuple goes to one of its key's
    candidates; ``L``/``C`` cover exactly the current window (tumbling) or the live blocks (sliding); a
    restored snapshot continues identically.
    """

    splits_keys: ClassVar[bool] = True
    n_hashes: ClassVar[int] = 2  # the default d; the codec actually computes d hashes (``_hash_count``)

    def __init__(
        self,
        n: int,
        *,
        d: int = _DEFAULTS.d,
        cardinality: Cardinality = _DEFAULTS.cardinality,
        windowing: Windowing = _DEFAULTS.windowing,
        **kw: Any,
    ) -> None:
        self.d = int(d)
        self.cardinality = cardinality
        self.windowing = windowing
        super().__init__(n, **kw)
        self._params.update(d=self.d, cardinality=cardinality, windowing=windowing)
        self.sliding = windowing == "sliding"
        self.blocks_per_window = math.ceil(self.window / self.slide) if self.sliding else 1
        self.store: ExactSets | HllSets | KeyMasks | WindowHomes = self._make_store()
        self.loads: list[int] = [0] * self.n
        self.block_loads: dict[int, npt.NDArray[np.int64]] = {}
        self.block = -1

    def _make_store(self) -> ExactSets | HllSets | KeyMasks | WindowHomes:
        if self.cardinality == "hll":
            return HllSets(self.n, sliding=self.sliding)
        if self.sliding:
            return ExactSets(self.n, sliding=True)
        if self.n <= COMPILED_MAX_N:
            holistic_kernels()  # load the compiled loops now rather than inside the first batch
        return KeyMasks(self.n)

    def _sets(self) -> ExactSets | HllSets:
        """The per-combiner key sets of the general path (exact tumbling windows use :mod:`.tumbling`)."""
        store = self.store
        if isinstance(store, WindowHomes | KeyMasks):
            raise TypeError(f"{self.name} with exact tumbling windows keeps {type(store).__name__}, not key sets")
        return store

    def _span(self) -> float:
        return self.slide if self.sliding else self.window

    def _reset(self) -> None:
        self.loads = [0] * self.n
        self.block_loads = {}
        self.store.reset()

    def _advance(self, block: int) -> None:
        if block <= self.block:
            return
        keep = self.blocks_per_window
        if block - self.block >= keep:
            self._reset()
        else:
            gone = range(self.block - keep + 1, block - keep + 1)
            for old in gone:
                expired = self.block_loads.pop(old, None)
                if expired is not None:
                    self.loads = [a - int(b) for a, b in zip(self.loads, expired, strict=True)]
            self.store.expire(gone)
        self.block = block
        self.store.block = block

    def _decide(self, ids: U64, cand: I64, counts: I64) -> npt.ArrayLike:
        seq = self._choose(ids.tolist(), cand, counts)
        if self.sliding:
            add = np.bincount(seq, minlength=self.n)
            prev = self.block_loads.get(self.block)
            self.block_loads[self.block] = add if prev is None else prev + add
        return seq

    @abstractmethod
    def _choose(self, ids: list[int], cand: I64, counts: I64) -> npt.NDArray[np.int64]:
        """Sliding windows or HLL: decide a batch's keys (ids, candidates, tuples) in key-grouped order.

        Must update ``self.loads`` and ``self.store`` as the algorithm would tuple by tuple on the grouped
        order, and return every tuple's combiner in that order.
        """


class _SpreadingPartitioner(HolisticPartitioner):
    """CM and LM: every tuple is decided on its own, so a key may sit in several combiners' sets."""

    def _decide(self, ids: U64, cand: I64, counts: I64) -> npt.ArrayLike:
        if isinstance(self.store, KeyMasks):
            return self._decide_masks(self.store, ids.tolist(), cand, counts)
        return super()._decide(ids, cand, counts)

    def _decide_masks(self, store: KeyMasks, ids: list[int], cand: I64, counts: I64) -> npt.NDArray[np.int64]:
        """Exact tumbling windows: the rule on the keys' bit masks (compiled for ``n <= 64``)."""
        kernels = holistic_kernels() if self.n <= COMPILED_MAX_N else None
        if kernels is None:
            masks = store.read(ids)
            seq = self._rule(store.card, cand, counts, mask_adder(masks, store.card))
            store.write(ids, masks)
            return seq
        masks_arr = np.fromiter(store.read(ids), np.uint64, len(ids))
        card = np.asarray(store.card, dtype=np.int64)
        seq = self._compiled(kernels, card, cand, counts, masks_arr)
        store.card = card.tolist()
        store.write(ids, masks_arr.tolist())
        return seq

    def _choose(self, ids: list[int], cand: I64, counts: I64) -> npt.NDArray[np.int64]:
        """Sliding windows or HLL: the rule on the store's per-combiner key sets."""
        store = self._sets()
        add = store.add
        return self._rule(store.card, cand, counts, lambda i, c: add(ids[i], c))

    @abstractmethod
    def _rule(self, card: list[Any], cand: I64, counts: I64, add: Add) -> npt.NDArray[np.int64]:
        """Algorithm hook: decide a batch's keys in key-grouped order with :mod:`.holistic_rules`.

        ``cand`` holds each key's candidates and ``counts`` its tuples; ``add`` puts a key into a set and
        updates ``card``. Must update ``self.loads`` and return every tuple's combiner in grouped order.
        """

    @abstractmethod
    def _compiled(self, kernels: Any, card: I64, cand: I64, counts: I64, masks: U64) -> npt.NDArray[np.int64]:
        """The compiled twin of :meth:`_rule` on ``uint64`` masks (updates ``card`` and ``masks`` in place)."""


class _AffinityPartitioner(HolisticPartitioner):
    """AM and cAM: a key already held by a candidate's set goes there; a new key to the lower metric.

    ``splits_keys`` is ``False``: with exact sets a key stays on one combiner inside each of the router's
    windows (it may move at a window boundary; with HLL a false "contains" may split it).
    """

    splits_keys: ClassVar[bool] = False
    by_tuples: ClassVar[bool] = False

    def _make_store(self) -> ExactSets | HllSets | KeyMasks | WindowHomes:
        if self.cardinality == "exact" and not self.sliding:
            holistic_kernels()  # load the compiled placement loops now rather than inside the first batch
            return WindowHomes(self.n)  # one home per key and window: vectorised (tumbling.py)
        return super()._make_store()

    def _decide(self, ids: U64, cand: I64, counts: I64) -> npt.ArrayLike:
        store = self.store
        if not isinstance(store, WindowHomes):
            return super()._decide(ids, cand, counts)
        homes = store.lookup(ids)
        new = np.flatnonzero(homes < 0)
        if new.shape[0]:
            homes[new] = self._place(store, homes, counts, new, np.ascontiguousarray(cand[new]))
            store.insert(ids[new], homes[new])
        add = np.bincount(homes, weights=counts, minlength=self.n).astype(np.int64)
        self.loads = [a + b for a, b in zip(self.loads, add.tolist(), strict=True)]
        return np.repeat(homes, counts)

    def _place(self, store: WindowHomes, homes: I64, counts: I64, new: npt.NDArray[np.intp], cand: I64) -> I64:
        """Homes of the batch's keys new to the window (candidates ``cand``), counted in ``store.card``."""
        kernels = holistic_kernels()
        placed = np.empty(new.shape[0], dtype=np.int64)
        if not self.by_tuples:  # AM: the fewest keys; each placement counts at once
            if kernels is None:
                return np.asarray(place_by_cards(store.card, cand))
            card = np.asarray(store.card, dtype=np.int64)
            kernels.am_kernel(card, cand, placed)
            store.card = card.tolist()
            return placed
        before = known_prefix_loads(homes, counts, new, cand) + np.asarray(self.loads)[cand]  # cAM: the fewest tuples
        if kernels is None:
            placed[:] = place_by_loads(self.n, cand, before, counts[new].tolist())
        else:
            kernels.cam_kernel(self.n, cand, before, counts[new], placed)
        store.card = (np.asarray(store.card, dtype=np.int64) + np.bincount(placed, minlength=self.n)).tolist()
        return placed

    def _choose(self, ids: list[int], cand: I64, counts: I64) -> npt.NDArray[np.int64]:
        """Sliding windows or HLL: a key held by a candidate's set stays there, a new one is placed."""
        loads = self.loads
        store = self._sets()
        metric: list[Any] = loads if self.by_tuples else store.card
        find, add = store.find, store.add
        refresh = self.sliding
        choice: list[int] = []
        for kid, row, c in zip(ids, cand.tolist(), counts.tolist(), strict=True):
            home = find(kid, row)
            if home < 0:
                home = least(metric, row)
                add(kid, home)
            elif refresh:
                add(kid, home)
            loads[home] += c
            choice.append(home)
        return np.repeat(np.asarray(choice, dtype=np.int64), counts)


class AMPartitioner(_AffinityPartitioner):
    """AM: group affinity, new keys to the candidate with the fewest distinct keys (Alg. 3)."""

    name = "am"


class CAMPartitioner(_AffinityPartitioner):
    """cAM: group affinity, new keys to the candidate with the fewest tuples (Alg. 4).

    With exact sets every tuple of a key inside a window goes to one combiner (the one its first tuple
    chose); with ``cardinality="hll"`` a false "contains" may split a key.
    """

    name = "cam"
    by_tuples = True


class CMPartitioner(_SpreadingPartitioner):
    """CM: each tuple to the candidate with the fewest distinct keys (Alg. 2); tuple-count agnostic."""

    name = "cm"

    def _rule(self, card: list[Any], cand: I64, counts: I64, add: Add) -> npt.NDArray[np.int64]:
        runs, lens = cm_loop(card, cand, counts.tolist(), add)
        return self._runs(np.asarray(runs, dtype=np.int64), np.asarray(lens, dtype=np.int64))

    def _compiled(self, kernels: Any, card: I64, cand: I64, counts: I64, masks: U64) -> npt.NDArray[np.int64]:
        runs = np.empty(cand.shape[0] * (cand.shape[1] + 1), dtype=np.int64)
        lens = np.empty_like(runs)
        r = kernels.cm_kernel(card, np.ascontiguousarray(cand), counts, masks, runs, lens)
        return self._runs(runs[:r], lens[:r])

    def _runs(self, runs: I64, lens: I64) -> npt.NDArray[np.int64]:
        """Count run-length decisions in ``loads`` and expand them to one combiner per tuple."""
        add = np.bincount(runs, weights=lens, minlength=self.n).astype(np.int64).tolist()
        self.loads = [a + b for a, b in zip(self.loads, add, strict=True)]
        return np.repeat(runs, lens)


class LMPartitioner(_SpreadingPartitioner):
    """LM: each tuple to the candidate with the lowest hybrid load ``p·L' + (1-p)·C'`` (Alg. 5, Eq. 7-9).

    ``p`` weighs tuple count against cardinality; ``p = 1`` behaves as windowed PKG.
    """

    name = "lm"

    def __init__(self, n: int, *, p: float = _DEFAULTS.p, **kw: Any) -> None:
        super().__init__(n, **kw)
        self.p = float(p)
        self._params["p"] = self.p

    def _rule(self, card: list[Any], cand: I64, counts: I64, add: Add) -> npt.NDArray[np.int64]:
        return np.asarray(lm_loop(card, self.loads, self.p, cand, counts.tolist(), add), dtype=np.int64)

    def _compiled(self, kernels: Any, card: I64, cand: I64, counts: I64, masks: U64) -> npt.NDArray[np.int64]:
        loads = np.asarray(self.loads, dtype=np.int64)
        out = np.empty(int(counts.sum()), dtype=np.int64)
        kernels.lm_kernel(card, loads, self.p, np.ascontiguousarray(cand), counts, masks, out)
        self.loads = loads.tolist()
        return out
