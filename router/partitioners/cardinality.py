"""Per-combiner distinct-key sets for the Holistic partitioners ([Holistic], Sec. 3.2): exact or HLL.

Both stores offer the same three operations on key ids (uint64 as Python ints): :meth:`find` (the first
candidate whose set holds the key), :meth:`add` (insert; says whether the set changed) and ``card``
(a list, one cardinality per combiner). Blocks support sliding windows (exact sets only).
"""

from __future__ import annotations

from collections.abc import Iterable
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

    def expire(self, blocks: Iterable[int]) -> None:
        """Drop the pairs last seen in one of ``blocks`` (sliding windows)."""
        for block in blocks:
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

    With ``sliding``, every insert also goes to a per-block sketch; :meth:`expire` drops blocks and
    rebuilds each combiner's window sketch as the union (``hll_union``) of the blocks still live.
    """

    def __init__(self, n: int, lg_k: int = HLL_LG_K, sliding: bool = False) -> None:
        self.n = n
        self.lg_k = lg_k
        self.sliding = sliding
        self.block = 0
        self.reset()

    def reset(self) -> None:
        """Empty every sketch."""
        self.sketches = [ds.hll_sketch(self.lg_k) for _ in range(self.n)]
        self.card: list[float] = [0.0] * self.n
        self._probes: list[Any] = [None] * self.n
        self._pending: list[int | None] = [None] * self.n
        self.blocks: dict[int, list[Any]] = {}

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
        if self.sliding:
            per = self.blocks.get(self.block)
            if per is None:
                per = self.blocks[self.block] = [ds.hll_sketch(self.lg_k) for _ in range(self.n)]
            per[c].update(kid)
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

    def expire(self, blocks: Iterable[int]) -> None:
        """Forget ``blocks``: each window sketch becomes the union of the live blocks' sketches."""
        if not [b for b in blocks if self.blocks.pop(b, None) is not None]:
            return
        for c in range(self.n):
            union = ds.hll_union(self.lg_k)
            for per in self.blocks.values():
                union.update(per[c])
            self.sketches[c] = union.get_result()
        self.card = [s.get_estimate() for s in self.sketches]
        self._probes = [None] * self.n
        self._pending = [None] * self.n

    def __getstate__(self) -> dict[str, Any]:
        def dump(sketches: list[Any]) -> list[bytes]:
            return [s.serialize_updatable() for s in sketches]

        return {
            "n": self.n,
            "lg_k": self.lg_k,
            "sliding": self.sliding,
            "block": self.block,
            "sketches": dump(self.sketches),
            "blocks": {b: dump(per) for b, per in self.blocks.items()},
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        def load(raw: list[bytes]) -> list[Any]:
            return [ds.hll_sketch.deserialize(r) for r in raw]

        self.n, self.lg_k, self.sliding = state["n"], state["lg_k"], state["sliding"]
        self.block = state["block"]
        self.reset()
        self.sketches = load(state["sketches"])
        self.blocks = {b: load(raw) for b, raw in state["blocks"].items()}
        self.card = [s.get_estimate() for s in self.sketches]
