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
from router.partitioners.waterfill import pair_fill
from router.partitioners.windows import I64, U64, GroupedPartitioner
from schemas.partitioner_settings import PKGSettings

__all__ = ["PKGPartitioner", "greedy_counts", "greedy_fill"]

LoadMode = Literal["cumulative", "windowed"]
#: Defaults (and, through ``create``, bounds) of every parameter.
_DEFAULTS = PKGSettings()


def greedy_counts(loads: list[int], count: int) -> list[int]:
    """Tuples per candidate when ``count`` tuples go one by one to the least loaded, ties to the first.

    ``loads`` are the candidates' loads in priority order; the result is parallel to it. (FISH's
    :func:`router.partitioners.waterfill.level_fill` is the same rule with per-combiner tuple costs.)
    """
    d = len(loads)
    if d == 2:  # the closed form (the common case)
        xa = pair_fill(loads[0], loads[1], count)
        return [xa, count - xa]
    by_load = sorted(range(d), key=lambda j: (loads[j], j))
    remaining, pool, level = count, 1, loads[by_load[0]]
    while pool < d:
        need = (loads[by_load[pool]] - level) * pool
        if need > remaining:
            break
        remaining -= need
        level = loads[by_load[pool]]
        pool += 1
    per, extra = divmod(remaining, pool)
    level += per
    out = [0] * d
    for rank, j in enumerate(sorted(by_load[:pool])):
        out[j] = level - loads[j] + (1 if rank < extra else 0)
    return out


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
    order); ``loads`` is updated in place. Returns the combiner of every tuple, in grouped order.
    """
    pc: list[int] = []
    ps: list[int] = []
    pt: list[int] = []
    po: list[int] = []
    for g, (row, count) in enumerate(zip(rows, counts, strict=True)):
        starts = [loads[c] for c in row]
        for c, s, x in zip(row, starts, greedy_counts(starts, count), strict=True):
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
        if self.d == 2 and cand.shape[1] == 2:
            return self._decide2(cand, counts)
        return greedy_fill(cand.tolist(), counts.tolist(), self.loads)

    def _decide2(self, cand: I64, counts: I64) -> npt.ArrayLike:
        """``d = 2``: the compiled per-tuple loop, else :func:`~router.partitioners.waterfill.pair_fill` per key."""
        kernels = choice_kernels()
        if kernels is not None:
            loads_arr = np.array(self.loads, dtype=np.int64)
            out = np.empty(int(counts.sum()), dtype=np.int64)
            kernels.pkg_greedy(np.ascontiguousarray(cand), counts, loads_arr, out)
            self.loads = loads_arr.tolist()
            return out
        return self._decide2_python(cand, counts)

    def _decide2_python(self, cand: I64, counts: I64) -> npt.ArrayLike:
        """:meth:`_decide2` without numba: :func:`.waterfill.pair_fill` per key, then the per-tuple order."""
        loads = self.loads
        xs: list[int] = []  # tuples of each key on its first candidate
        splits: list[tuple[int, int, int]] = []  # (key, load of a, load of b) for keys on both
        for a, b, c in zip(cand[:, 0].tolist(), cand[:, 1].tolist(), counts.tolist(), strict=True):
            la = loads[a]
            lb = loads[b]
            xa = pair_fill(la, lb, c)
            if 0 < xa < c:
                splits.append((len(xs), la, lb))
            xs.append(xa)
            loads[a] = la + xa
            loads[b] = lb + c - xa
        take_a = np.asarray(xs, dtype=np.int64)
        if not splits:  # every key went to one candidate: no per-tuple ordering needed
            return np.repeat(np.where(take_a > 0, cand[:, 0], cand[:, 1]), counts)
        where, la_, lb_ = (np.asarray(col, dtype=np.int64) for col in zip(*splits, strict=True))
        starts = np.zeros((counts.shape[0], 2), dtype=np.int64)
        starts[where, 0] = la_
        starts[where, 1] = lb_
        take = np.stack([take_a, counts - take_a], axis=1).reshape(-1)
        keep = take > 0
        owners = np.repeat(np.arange(counts.shape[0]), 2)[keep]
        return greedy_sequence(cand.reshape(-1)[keep], starts.reshape(-1)[keep], take[keep], owners)
