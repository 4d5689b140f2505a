"""PKG: Partial Key Grouping ([PKG] (docs/partitioners.md)), and PK-d (``d > 2`` choices).

Each key has ``d`` distinct candidate combiners (seeded murmur3, identical on every router); each tuple
goes to the candidate with the lowest *locally estimated* load (tuples this router sent), ties to the
first candidate. The load counter is cumulative (the paper) or reset at each tumbling window boundary
(``load="windowed"``, window = the ``window`` argument, in the unit of ``times``).

Batches are decided in key-grouped order (see :mod:`router.partitioners.windows`): a key's tuples of
one batch are placed one after another by the greedy rule, which is water-filling over its candidates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import choice_kernels
from router.partitioners.waterfill import level_fill
from router.partitioners.windows import I64, U64, GroupedPartitioner
from schemas.partitioner_settings import PKGSettings

__all__ = ["PKGPartitioner", "greedy_fill", "greedy_sequence"]

LoadMode = Literal["cumulative", "windowed"]
#: Defaults (and, through ``create``, bounds) of every parameter.
_DEFAULTS = PKGSettings()


def greedy_sequence(
    cands: npt.ArrayLike, starts: npt.ArrayLike, takes: npt.ArrayLike, owners: npt.ArrayLike
) -> npt.NDArray[np.int64]:
    """Order water-filled placements as the per-tuple greedy would make them, for all keys at once.

    Placement ``p`` puts ``takes[p]`` tuples of key ``owners[p]`` (grouped position) on ``cands[p]``,
    whose load was ``starts[p]``; the greedy takes slots by increasing (key, load, candidate priority).
    Entries must be listed per key in candidate priority order.
    """
    take = np.asarray(takes, dtype=np.int64)
    rep = np.repeat(np.arange(take.shape[0]), take)
    first = np.cumsum(take) - take
    level = np.asarray(starts, dtype=np.int64)[rep] + (np.arange(rep.shape[0]) - first[rep])
    order = np.lexsort((rep, level, np.asarray(owners, dtype=np.int64)[rep]))
    return np.asarray(cands, dtype=np.int64)[rep[order]]


def greedy_fill(rows: Iterable[Sequence[int]], counts: Iterable[int], loads: list[int]) -> npt.NDArray[np.int64]:
    """Route each key's tuples one by one to the least loaded of its candidate ``rows`` (ties to the first).

    ``rows[g]`` are key ``g``'s candidates in priority order and ``counts[g]`` its tuples (keys in grouped
    order); ``loads`` is updated in place. Returns the combiner of every tuple, in grouped order. Per key,
    :func:`~router.partitioners.waterfill.level_fill` gives the tuples per candidate (the same rule as
    FISH's, with equal tuple costs) and :func:`greedy_sequence` the order in which the greedy placed them.
    """
    pc: list[int] = []
    ps: list[int] = []
    pt: list[int] = []
    po: list[int] = []
    for g, (row, count) in enumerate(zip(rows, counts, strict=True)):
        starts = [loads[c] for c in row]
        for c, s, x in zip(row, starts, level_fill(row, count, loads, None), strict=True):
            if x:
                loads[c] = s + x
                pc.append(c)
                ps.append(s)
                pt.append(x)
                po.append(g)
    return greedy_sequence(pc, ps, pt, po)


class PKGPartitioner(GroupedPartitioner):
    """Partial Key Grouping over ``d`` choices (``d=2``: PKG; ``d>2``: PK-d / D-Choices).

    Parameters: ``d`` candidates per key (capped at ``n``); ``load`` ``"cumulative"`` (the paper) or
    ``"windowed"`` (reset at each tumbling ``window`` boundary); defaults and bounds:
    :class:`~schemas.partitioner_settings.PKGSettings`. Guarantees: every tuple goes to one of its
    key's candidates; the state is the load vector (and the current window), so a restored snapshot
    continues identically.
    """

    name = "pkg"
    splits_keys = True
    n_hashes = 2

    def __init__(self, n: int, *, d: int = _DEFAULTS.d, load: LoadMode = _DEFAULTS.load, **kw: Any) -> None:
        self.d = int(d)
        self.load = load
        super().__init__(n, **kw)
        self._params.update(d=self.d, load=load)
        self.loads = [0] * self.n
        self.block = -1

    def _span(self) -> float | None:
        return self.window if self.load == "windowed" else None

    def _advance(self, block: int) -> None:
        if block > self.block:
            self.block = block
            self.loads = [0] * self.n

    def _decide(self, ids: U64, cand: I64, counts: I64) -> npt.ArrayLike:
        """Every tuple, key after key, to its least loaded candidate (ties: the first).

        Two candidates run the compiled per-tuple loop (:func:`~router.partitioners.kernels_choice.pkg_greedy`);
        its Python reference, and the rule for any ``d``, is :func:`greedy_fill` (tests pin the two equal).
        """
        kernels = choice_kernels() if cand.shape[1] == 2 else None
        if kernels is None:
            return greedy_fill(cand.tolist(), counts.tolist(), self.loads)
        loads_arr = np.array(self.loads, dtype=np.int64)
        out = np.empty(int(counts.sum()), dtype=np.int64)
        kernels.pkg_greedy(np.ascontiguousarray(cand), counts, loads_arr, out)
        self.loads = loads_arr.tolist()
        return out
