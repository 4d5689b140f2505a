"""Consistent-hash ring with virtual nodes (FISH Sec. 5), identical on every router.

Every member (a combiner id) owns ``virtual_nodes`` points on a 2^32 ring, at
``murmur3_32(b"combiner:<id>:<v>", seed)``. A key sits at its own murmur3 hash (the partitioner's first
key hash, same seed convention); its candidates are the first ``d`` *distinct* members met walking
clockwise from it (a point equal to the key's position counts as met). Adding or removing a member only
moves the keys whose walk crosses that member's points, about ``1/(n+1)`` of them for one added member
(versus ``n/(n+1)`` for ``hash mod n``).

For speed the walk is precomputed: ``successors[i, j]`` is the ``j``-th distinct member clockwise from
ring point ``i``, so a batch of keys is one ``searchsorted`` plus one ``take`` (row ``R`` repeats row 0,
so a key past the last point needs no wrap-around).
"""

from __future__ import annotations

from collections.abc import Sequence

import mmh3
import numpy as np
import numpy.typing as npt

__all__ = ["ConsistentRing"]

I64 = npt.NDArray[np.int64]


class ConsistentRing:
    """Members on a murmur3 ring with virtual nodes; deterministic for a given (members, vnodes, seed)."""

    def __init__(self, members: Sequence[int], virtual_nodes: int = 64, seed: int = 13) -> None:
        if not members:
            raise ValueError("a ring needs at least one member")
        if len(set(members)) != len(members):
            raise ValueError(f"ring members must be distinct, got {list(members)}")
        if virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be >= 1, got {virtual_nodes}")
        self.members: tuple[int, ...] = tuple(int(m) for m in members)
        self.virtual_nodes = int(virtual_nodes)
        self.seed = int(seed)
        pos, own = [], []
        for m in self.members:
            for v in range(self.virtual_nodes):
                pos.append(mmh3.hash(f"combiner:{m}:{v}".encode("ascii"), self.seed, signed=False))
                own.append(m)
        # Sort by position, ties (a 32-bit collision) by member id so every router agrees.
        order = np.lexsort((np.asarray(own), np.asarray(pos, dtype=np.int64)))
        self.positions: I64 = np.asarray(pos, dtype=np.int64)[order]
        self.owners: I64 = np.asarray(own, dtype=np.int64)[order]
        self.successors: I64 = self._successor_table()
        # Row R = row 0 (wrap-around), and a contiguous copy of the first two columns (the common d <= 2).
        self._succ_ext = np.concatenate([self.successors, self.successors[:1]])
        self._succ2 = np.ascontiguousarray(self._succ_ext[:, :2])
        self._owner_ext = np.concatenate([self.owners, self.owners[:1]])

    def _successor_table(self) -> I64:
        """``[points, members]``: distinct members in clockwise order from every ring point."""
        r = self.positions.shape[0]
        k = len(self.members)
        idx = np.arange(r)
        # dist[i, c]: ring steps from point i to the next point owned by member c (0 if i is c's).
        dist = np.empty((r, k), dtype=np.int64)
        for c, m in enumerate(self.members):
            mine = np.flatnonzero(self.owners == m)
            nxt = np.searchsorted(mine, idx, side="left")
            wrapped = nxt == mine.shape[0]
            target = np.where(wrapped, mine[0] + r, mine[np.minimum(nxt, mine.shape[0] - 1)])
            dist[:, c] = target - idx
        order = np.argsort(dist, axis=1, kind="stable")
        return np.asarray(self.members, dtype=np.int64)[order]

    def points(self, key_hashes: npt.ArrayLike) -> I64:
        """Index of the first ring point clockwise from each key hash."""
        h = np.asarray(key_hashes, dtype=np.int64)
        return np.searchsorted(self.positions, h, side="left") % self.positions.shape[0]

    def candidates(self, key_hashes: npt.ArrayLike, d: int) -> I64:
        """``[keys, d]``: the first ``d`` distinct members clockwise from each key (``d`` capped)."""
        d = max(1, min(int(d), len(self.members)))
        pts = np.searchsorted(self.positions, np.asarray(key_hashes, dtype=np.int64), side="left")
        table = self._succ2 if d <= 2 else self._succ_ext
        return table.take(pts, axis=0)[:, :d]

    def owner(self, key_hashes: npt.ArrayLike) -> I64:
        """The first member clockwise from each key (its primary candidate)."""
        pts = np.searchsorted(self.positions, np.asarray(key_hashes, dtype=np.int64), side="left")
        return self._owner_ext.take(pts)
