"""Per-combiner distinct-key sets for the Holistic partitioners (papers/004, Sec. 3.2): exact or HLL.

Both stores offer the same three operations on key ids (uint64 as Python ints): :meth:`find` (the first
candidate whose set holds the key), :meth:`add` (insert; says whether the set changed) and ``card``
(a list, one cardinality per combiner). Blocks support sliding windows (exact sets only).
"""

from __future__ import annotations

from typing import Any

import datasketches as ds

__all__ = ["HLL_LG_K", "ExactSets", "HllSets"]

#: 2^12 registers, as in the paper's HLL variant ("-H").
HLL_LG_K = 12


class ExactSets:
    """Exact sets: ``where[key] = {combiner: last block the pair was seen in}``.

    With ``sliding``, every (key, combiner) pair remembers the last block it was seen in, and
    :meth:`expire` drops the pairs whose last sighting is the expiring block; otherwise :meth:`reset`
    at each tumbling window boundary is the only expiry.
    """

    def __init__(self, n: int, sliding: bool = False) -> None:
        self.n = n
        self.sliding = sliding
        self.card: list[int] = [0] * n
        self.where: dict[int, dict[int, int]] = {}
        self.touched: dict[int, list[tuple[int, int]]] = {}
        self.block = 0

    def find(self, kid: int, row: list[int]) -> int:
        """The first candidate in ``row`` whose set holds ``kid``, or ``-1``."""
        ent = self.where.get(kid)
        if ent:
            for c in row:
                if c in ent:
                    return c
        return -1

    def add(self, kid: int, c: int) -> bool:
        """Insert ``kid`` into combiner ``c``'s set (refreshing its block); ``True`` if it was new there."""
        ent = self.where.get(kid)
        if ent is None:
            ent = self.where[kid] = {}
        last = ent.get(c)
        if last == self.block:
            return False
        ent[c] = self.block
        if self.sliding:
            self.touched.setdefault(self.block, []).append((kid, c))
        if last is None:
            self.card[c] += 1
            return True
        return False

    def reset(self) -> None:
        """Empty every set."""
        self.card = [0] * self.n
        self.where = {}
        self.touched = {}

    def expire(self, block: int) -> None:
        """Drop the pairs last seen in ``block`` (sliding windows)."""
        for kid, c in self.touched.pop(block, ()):
            ent = self.where.get(kid)
            if ent is not None and ent.get(c) == block:
                del ent[c]
                self.card[c] -= 1
                if not ent:
                    del self.where[kid]


class HllSets:
    """One Apache DataSketches HLL sketch per combiner (``lg_k = 12``), with the paper's optimistic test.

    ``contains(k)`` = a trial insert does not change the estimate. The trial runs on a *probe*, a copy
    of the sketch, so sketches only ever hold keys actually sent to their combiner. A probe stays valid
    while it equals its sketch (it is refreshed lazily after a failed trial of a key sent elsewhere).
    """

    def __init__(self, n: int, lg_k: int = HLL_LG_K) -> None:
        self.n = n
        self.lg_k = lg_k
        self.reset()

    def reset(self) -> None:
        """Empty every sketch."""
        self.sketches = [ds.hll_sketch(self.lg_k) for _ in range(self.n)]
        self.card: list[float] = [0.0] * self.n
        self._probes: list[Any] = [None] * self.n
        self._pending: list[int | None] = [None] * self.n

    def _probe(self, c: int) -> Any:
        probe = self._probes[c]
        if probe is None or self._pending[c] is not None:
            probe = self._probes[c] = ds.hll_sketch.deserialize(self.sketches[c].serialize_updatable())
            self._pending[c] = None
        return probe

    def contains(self, kid: int, c: int) -> bool:
        """Optimistic membership: the estimate of combiner ``c`` does not change when ``kid`` is added."""
        probe = self._probe(c)
        before = probe.get_estimate()
        probe.update(kid)
        if probe.get_estimate() == before:
            return True
        self._pending[c] = kid
        return False

    def find(self, kid: int, row: list[int]) -> int:
        """The first candidate in ``row`` that (optimistically) holds ``kid``, or ``-1``."""
        for c in row:
            if self.contains(kid, c):
                return c
        return -1

    def add(self, kid: int, c: int) -> bool:
        """Insert ``kid`` into combiner ``c``'s sketch; ``True`` if its estimate changed."""
        sketch = self.sketches[c]
        sketch.update(kid)
        est = sketch.get_estimate()
        probe, pending = self._probes[c], self._pending[c]
        if probe is not None:
            if pending == kid:
                self._pending[c] = None  # the failed trial was this very insert: probe == sketch again
            elif pending is None:
                probe.update(kid)
            else:
                self._probes[c] = None
        if est == self.card[c]:
            return False
        self.card[c] = est
        return True

    def __getstate__(self) -> dict[str, Any]:
        return {"n": self.n, "lg_k": self.lg_k, "sketches": [s.serialize_updatable() for s in self.sketches]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.n = state["n"]
        self.lg_k = state["lg_k"]
        self.reset()
        self.sketches = [ds.hll_sketch.deserialize(raw) for raw in state["sketches"]]
        self.card = [s.get_estimate() for s in self.sketches]
