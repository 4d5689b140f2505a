"""Prompt's batch partitioner ([Prompt] (docs/partitioners.md), Alg. 2) for micro-batch mode.

Every :meth:`~router.partitioners.base.Partitioner.assign` call is one micro-batch (``N`` tuples, ``K``
distinct keys, ``p = n`` blocks); nothing is carried from one batch to the next (the paper clears its
``HTable``/``CountTree`` at every heartbeat). The batch is cut into ``p`` blocks:

1. **Frequency-aware buffering**: per-key counts of the batch, sorted by descending count (ties: first
   appearance). *Sorting once at the cut* is the choice here. Keeping the counts sorted while tuples arrive
   (Alg. 1's ``CountTree``, or an O(1)-per-increment bucket list) costs per-tuple interpreter work, whereas
   the cut-time sort is one ``bincount`` plus one radix ``argsort`` over the distinct keys (the costs of
   both are in docs/partitioners.md).
2. **Blocks** (Alg. 2): block size ``B/p = N/p``, block cardinality ``K/p``, split cut-off
   ``S = (N/p)/(K/p)``. Keys with count ``> S``, in descending count, each put a fragment of ``floor(S)``
   (at least 1) tuples into blocks ``b_1, b_2, ...`` round-robin and keep the residual. The remaining keys
   (count ``<= S``) are dealt whole in descending count, zig-zag: one key per block, the block order
   reversed after each pass, the first pass starting at ``b_1`` (not where phase 1's ``b_i`` stopped; see
   docs/partitioners.md). Residuals,
   in descending count, go back to their fragment's block if they fit in its remaining capacity;
   otherwise they fill that block and the rest goes to the block with the *lowest* remaining capacity
   that can hold it (best fit). When no block can hold the rest, it fills the block with the most
   remaining capacity and repeats (the paper leaves this case open).

Decisions where the paper is open:

- Block capacity is ``ceil(N/p)`` tuples (Eq. 13: the bins hold every tuple).
- ``K < p``: a block holds at least one key, so the cardinality is ``max(K/p, 1)`` and the cut-off becomes
  ``N/p``: every key larger than a block is split instead of leaving ``p - K`` blocks empty. (The Dalton
  repository's version divides by ``K/p`` in integers, which is 0 here, and walks keys by id, not count.)
- Tuples of a split key are taken in arrival order: the first ones fill the fragment's block (plus the
  residual part placed there), the next ones the following blocks in placement order.

Bounds (tested): every block holds at most ``ceil(N/p) + 2 S`` tuples (phases 1-2 leave blocks within
``S`` of each other per phase; phase 3 never fills past ``ceil(N/p)``), and a split key spans at most
``ceil(count/S) + 1`` blocks. Not implemented: Alg. 3 (reduce buckets: our reducers are hash-routed),
Alg. 4 (auto-scaling) and the early batch release (the router decides when to cut).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from router.partitioners.base import Partitioner
from router.partitioners.keys import KeyBatch

__all__ = ["BatchPlan", "PromptPartitioner", "partition_batch"]

I64 = npt.NDArray[np.int64]
#: Pieces of a plan: ``(keys, blocks, sizes)``; a key's pieces are consecutive, in placement order.
BatchPlan = tuple[I64, I64, I64]


def _descending(counts: I64) -> I64:
    """Key indices by descending count, ties by index (radix sort when the counts fit 16 bits)."""
    top = int(counts.max())
    if top < 1 << 16:
        return np.argsort((top - counts).astype(np.uint16), kind="stable")
    return np.argsort(-counts, kind="stable")


def _place_residual(rest: int, first: int, load: list[int], cap: int) -> list[tuple[int, int]]:
    """Alg. 2 lines 18-23: back to ``first`` if it fits, else fill it and best-fit the rest."""
    room = cap - load[first]
    if rest <= 0:
        return []
    if rest <= room:
        load[first] += rest
        return [(first, rest)]
    pieces = []
    if room > 0:
        load[first] = cap
        pieces.append((first, room))
        rest -= room
    p = len(load)
    while rest > 0:
        fit = [(cap - load[b], b) for b in range(p) if cap - load[b] >= rest]
        if fit:
            b = min(fit)[1]  # lowest remaining capacity that holds it (ties: lowest block)
            take = rest
        else:
            free, b = max((cap - load[b], -b) for b in range(p))
            b = -b
            take = min(rest, free) if free > 0 else rest  # no room anywhere (cannot happen): overfill
        load[b] += take
        pieces.append((b, take))
        rest -= take
    return pieces


def partition_batch(counts: npt.ArrayLike, p: int) -> BatchPlan:
    """Alg. 2 over one batch's per-key counts (``counts[k]`` tuples of key ``k``) into ``p`` blocks."""
    cnt = np.asarray(counts, dtype=np.int64).reshape(-1)
    k = cnt.shape[0]
    empty = np.zeros(0, dtype=np.int64)
    if k == 0:
        return empty, empty, empty
    n_tuples = int(cnt.sum())
    size = n_tuples / p
    cut = size / max(k / p, 1.0)
    frag = max(1, math.floor(cut))
    cap = math.ceil(size)
    order = _descending(cnt)
    n_heavy = int(np.count_nonzero(cnt > cut))
    heavy, light = order[:n_heavy], order[n_heavy:]
    # Phase 1: a fragment of every heavy key, round-robin from block 0.
    first = np.arange(n_heavy, dtype=np.int64) % p
    load_np = np.bincount(first, minlength=p).astype(np.int64) * frag
    # Phase 2: light keys zig-zag, from block 0 (Alg. 2 line 11 walks the partitions from the first).
    i = np.arange(light.shape[0], dtype=np.int64)
    pos = i % p
    blocks = np.where((i // p) % 2 == 0, pos, p - 1 - pos)
    load_np += np.bincount(blocks, weights=cnt[light], minlength=p).astype(np.int64)
    # Phase 3: residuals in descending count.
    load = load_np.tolist()
    keys, where, sizes = [light], [blocks], [cnt[light]]
    hk, hb, hs = [], [], []
    for key, c, b0 in zip(heavy.tolist(), cnt[heavy].tolist(), first.tolist(), strict=True):
        pieces = _place_residual(c - frag, b0, load, cap)
        if pieces and pieces[0][0] == b0:
            pieces[0] = (b0, pieces[0][1] + frag)
        else:
            pieces.insert(0, (b0, frag))
        for b, s in pieces:
            hk.append(key)
            hb.append(b)
            hs.append(s)
    keys.append(np.asarray(hk, dtype=np.int64))
    where.append(np.asarray(hb, dtype=np.int64))
    sizes.append(np.asarray(hs, dtype=np.int64))
    key_arr, block_arr, size_arr = (np.concatenate(a).astype(np.int64) for a in (keys, where, sizes))
    # A key's pieces together, in placement order (radix sort when the key indices fit 16 bits).
    grouped = np.argsort(key_arr.astype(np.uint16) if k <= 1 << 16 else key_arr, kind="stable")
    return key_arr[grouped], block_arr[grouped], size_arr[grouped]


class PromptPartitioner(Partitioner):
    """Prompt's micro-batch partitioner: each ``assign`` call is one micro-batch cut into ``n`` blocks."""

    name = "prompt"
    splits_keys = True
    n_hashes = 0

    def _assign(self, batch: KeyBatch, times: np.ndarray) -> np.ndarray:
        cnt = batch.counts()
        keys, blocks, sizes = partition_batch(cnt, self.n)
        if keys.shape[0] == batch.distinct:  # no key split: one block per key
            per_key = np.empty(batch.distinct, dtype=np.int64)
            per_key[keys] = blocks
            return per_key[batch.inverse]
        inv = batch.inverse
        small = inv.astype(np.uint16) if batch.distinct <= 1 << 16 else inv
        order = np.argsort(small, kind="stable")  # tuples grouped by key, arrival order inside
        out = np.empty(batch.size, dtype=np.int64)
        out[order] = np.repeat(blocks, sizes)
        return out
