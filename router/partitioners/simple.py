"""Hash (key grouping) and Shuffle (round-robin): the two baselines."""

from __future__ import annotations

from typing import Any

import numpy as np

from router.partitioners.base import Partitioner
from router.partitioners.keys import KeyBatch

__all__ = ["HashPartitioner", "ShufflePartitioner"]


class HashPartitioner(Partitioner):
    """``murmur3_32(key_bytes, hash_seed) mod n``: every tuple of a key on one combiner, always."""

    name = "hash"
    splits_keys = False
    n_hashes = 1

    def _assign(self, batch: KeyBatch, times: np.ndarray) -> np.ndarray:
        return (batch.hashes[:, 0] % np.uint32(self.n))[batch.inverse]


class ShufflePartitioner(Partitioner):
    """Round-robin per router instance (perfect balance, every key split)."""

    name = "shuffle"
    splits_keys = True
    n_hashes = 0

    def __init__(self, n: int, **kw: Any) -> None:
        super().__init__(n, **kw)
        self.next = int(self.rng.integers(self.n))

    def _assign(self, batch: KeyBatch, times: np.ndarray) -> np.ndarray:
        out = (np.arange(batch.size, dtype=np.int64) + self.next) % self.n
        self.next = int((self.next + batch.size) % self.n)
        return out
