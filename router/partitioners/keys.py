"""Key normalisation shared by every partitioner.

A batch of keys (numpy integers, or a sequence of ``bytes``/``str``/``int``) becomes a :class:`KeyBatch`:
the batch's distinct keys in order of first appearance, a 64-bit key id per distinct key, the murmur3
hashes each algorithm needs, and the per-tuple index into the distinct keys.

A key's identity is its bytes: ``str`` keys are UTF-8 encoded and an integer ``k`` is the ASCII decimal
``str(k)``, so ``7``, ``"7"`` and ``b"7"`` are the same key everywhere (ids, hashes, decisions). Hashes
are ``murmur3_32(key_bytes, seed)`` (mmh3), identical on every process and machine.

A batch may also come as a :class:`KeyBuffer`: every key's bytes in one buffer, as the router's compiled JSON
scan leaves them. It is hashed whole by compiled loops (:mod:`router.partitioners.key_hash`), with the same ids
and hashes, and no dict lookup or cache entry per key.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, overload

import mmh3
import numpy as np
import numpy.typing as npt

from router.partitioners.accel import choice_kernels
from schemas.partitioner_settings import HASH_SEED

__all__ = [
    "DEFAULT_HASH_SEED",
    "KEY_ID_SEED",
    "SEED_STEP",
    "KeyBatch",
    "KeyBuffer",
    "KeyCodec",
    "Keys",
    "distinct_candidates",
    "key_bytes",
]

#: Seed of the 64-bit key id (state tables are keyed by it).
KEY_ID_SEED = 0x5EED
#: Seed of the first murmur3 hash (the settings' default); hash j uses ``hash_seed + SEED_STEP * j``.
DEFAULT_HASH_SEED = HASH_SEED
SEED_STEP = 4
#: Non-negative integer keys below this bound are cached in dense numpy tables (fast path for benchmarks).
DENSE_LIMIT = 1 << 22
#: The dict cache for other keys is cleared when it grows past this many entries ...
MAX_CACHE = 1 << 21
#: ... or past this many bytes (key sizes plus :data:`ENTRY_BYTES` per entry: 2M keys of 4 KB would be 8 GB).
MAX_CACHE_BYTES = 256 << 20
#: Estimated cost of one cache entry besides the key's own bytes (dict slot, str header, table rows).
ENTRY_BYTES = 120


@dataclass(frozen=True, slots=True)
class KeyBuffer(Sequence[str]):
    """A batch of keys as their canonical bytes in one buffer: key ``t`` is ``data[offsets[t]:offsets[t + 1]]``.

    ``keys`` holds the same keys as ``str``. The codec hashes ``data``; to anything else (a partitioner that reads
    the keys themselves) the buffer is the sequence of those ``str`` keys.
    """

    data: npt.NDArray[np.uint8]
    offsets: npt.NDArray[np.int32]
    keys: Sequence[str]

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return self.keys[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys)


Keys = npt.ArrayLike | Sequence[bytes | str | int] | KeyBuffer
U64 = npt.NDArray[np.uint64]
U32 = npt.NDArray[np.uint32]
IntP = npt.NDArray[np.intp]


def key_bytes(key: Any) -> bytes:
    """Return the canonical bytes of one key (see the module docstring)."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, int | np.integer):
        return str(int(key)).encode("ascii")
    if isinstance(key, bytearray | memoryview):
        return bytes(key)
    raise TypeError(f"key must be bytes, str or int, got {type(key).__name__}: {key!r:.80}")


@dataclass(frozen=True, slots=True)
class KeyBatch:
    """One batch of keys, reduced to its distinct keys.

    ``ids[u]`` and ``hashes[u, j]`` describe distinct key ``u`` (in order of first appearance);
    ``inverse[t]`` is the distinct-key index of tuple ``t``.
    """

    ids: U64
    hashes: U32
    inverse: IntP

    @property
    def size(self) -> int:
        """Number of tuples in the batch."""
        return int(self.inverse.shape[0])

    @property
    def distinct(self) -> int:
        """Number of distinct keys in the batch."""
        return int(self.ids.shape[0])

    def counts(self) -> npt.NDArray[np.int64]:
        """Tuples per distinct key."""
        return np.bincount(self.inverse, minlength=self.distinct).astype(np.int64)

    def tuple_ids(self) -> U64:
        """The key id of every tuple."""
        return self.ids[self.inverse]


def _first_appearance(uniq: np.ndarray, first: IntP, inverse: IntP) -> tuple[np.ndarray, IntP]:
    """Reorder ``np.unique`` output from sorted order to order of first appearance."""
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    return uniq[order], rank[inverse]


class KeyCodec:
    """Turns key batches into :class:`KeyBatch` objects, caching each key's id and hashes.

    Owned by one partitioner instance (not thread-safe). The cache is derived state: it is rebuilt on
    demand and never part of a snapshot.
    """

    def __init__(self, n_hashes: int, hash_seed: int = DEFAULT_HASH_SEED) -> None:
        if n_hashes < 0:
            raise ValueError(f"n_hashes must be >= 0, got {n_hashes}")
        self.n_hashes = n_hashes
        self.hash_seed = hash_seed
        if choice_kernels() is not None:  # load the compiled loops now (once per process), not in the first batch
            from router.partitioners.key_hash import warm

            warm()
        self.seeds = tuple(hash_seed + SEED_STEP * j for j in range(n_hashes))
        self._cache: dict[Any, int] = {}  # key -> its row in _ids / _hashes
        self._used = 0  # rows of _ids / _hashes in use
        self._cache_bytes = 0  # estimated bytes held by _cache (see MAX_CACHE_BYTES)
        self._scratch: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)  # all -1: the compiled encode's map
        self._ids: U64 = np.zeros(0, dtype=np.uint64)
        self._hashes: U32 = np.zeros((0, n_hashes), dtype=np.uint32)
        self._dense_ids: U64 = np.zeros(0, dtype=np.uint64)
        self._dense_h: U32 = np.zeros((0, n_hashes), dtype=np.uint32)
        self._dense_known: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._seed_array = np.array(self.seeds, dtype=np.uint32)  # the seeds, for the compiled buffer hash

    def __getstate__(self) -> dict[str, Any]:
        return {"n_hashes": self.n_hashes, "hash_seed": self.hash_seed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["n_hashes"], state["hash_seed"])  # type: ignore[misc]

    def _compute_many(self, keys: list[Any]) -> tuple[U64, U32]:
        """Ids and hashes of many keys at once (one list comprehension per hash, bulk array fills)."""
        raw = [key_bytes(k) for k in keys]
        hash64, hash32 = mmh3.hash64, mmh3.hash
        ids = np.fromiter((hash64(b, KEY_ID_SEED, signed=False)[0] for b in raw), np.uint64, len(raw))
        hashes = np.empty((len(raw), self.n_hashes), dtype=np.uint32)
        for j, seed in enumerate(self.seeds):
            hashes[:, j] = np.fromiter((hash32(b, seed, signed=False) for b in raw), np.uint32, len(raw))
        return ids, hashes

    def _rows(self, keys: Sequence[Any]) -> npt.NDArray[np.intp]:
        """Row of every key in the id/hash tables, computing (in bulk) the keys not seen before."""
        cache = self._cache
        if len(cache) + len(keys) > MAX_CACHE or self._cache_bytes > MAX_CACHE_BYTES:  # tables stay <= MAX_CACHE
            cache.clear()
            self._used = 0
            self._cache_bytes = 0
        get = cache.get
        rows = np.fromiter(map(get, keys, repeat(-1)), np.intp, len(keys))
        missing = np.flatnonzero(rows < 0)
        if missing.size:
            new = list(dict.fromkeys(keys[i] for i in missing.tolist()))  # a key may repeat in ``keys``
            new_ids, new_hashes = self._compute_many(new)
            lo, hi = self._used, self._used + len(new)
            if hi > self._ids.shape[0]:
                size = 1 << max(10, (hi - 1).bit_length())
                self._ids = np.resize(self._ids, size)
                self._hashes = np.resize(self._hashes, (size, self.n_hashes))
            self._ids[lo:hi], self._hashes[lo:hi] = new_ids, new_hashes
            cache.update(zip(new, range(lo, hi), strict=True))
            self._used = hi
            self._cache_bytes += sum(len(k) if type(k) in (str, bytes) else 8 for k in new) + ENTRY_BYTES * len(new)
            rows[missing] = np.fromiter(map(cache.__getitem__, (keys[i] for i in missing.tolist())), np.intp)
        return rows

    def _lookup(self, keys: list[Any]) -> tuple[U64, U32]:
        rows = self._rows(keys)
        return self._ids[rows], self._hashes[rows]

    def _dense(self, uniq: npt.NDArray[np.int64]) -> tuple[U64, U32]:
        top = int(uniq.max()) + 1 if uniq.size else 0
        if top > self._dense_known.shape[0]:
            size = 1 << max(10, (top - 1).bit_length())
            grow = size - self._dense_known.shape[0]
            self._dense_ids = np.concatenate([self._dense_ids, np.zeros(grow, np.uint64)])
            self._dense_h = np.concatenate([self._dense_h, np.zeros((grow, self.n_hashes), np.uint32)])
            self._dense_known = np.concatenate([self._dense_known, np.zeros(grow, bool)])
        missing = uniq[~self._dense_known[uniq]]
        if missing.size:
            self._dense_ids[missing], self._dense_h[missing] = self._compute_many(missing.tolist())
            self._dense_known[missing] = True
        return self._dense_ids[uniq], self._dense_h[uniq]

    def encode(self, keys: Keys) -> KeyBatch:
        """Reduce a batch of keys to a :class:`KeyBatch`."""
        if isinstance(keys, KeyBuffer):
            return self._encode_buffer(keys)
        arr = keys if isinstance(keys, np.ndarray) else None
        if arr is None and isinstance(keys, Sequence) and keys and isinstance(keys[0], int):
            arr = np.asarray(keys)
        if arr is not None and arr.dtype.kind in "iu":
            flat = arr.reshape(-1).astype(np.int64, copy=False)
            uniq, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
            uniq, inverse = _first_appearance(uniq, first, inverse.reshape(-1))
            if uniq.size and uniq[0] >= 0 and int(uniq.max()) < DENSE_LIMIT and int(uniq.min()) >= 0:
                ids, hashes = self._dense(uniq)
            else:
                ids, hashes = self._lookup(uniq.tolist())
            return KeyBatch(ids, hashes, inverse.astype(np.intp, copy=False))
        seq: Sequence[Any] = keys.tolist() if isinstance(keys, np.ndarray) else keys  # type: ignore[assignment]
        kernels = choice_kernels()
        if kernels is not None:  # one dict lookup per tuple, then the first-appearance pass compiled
            rows = self._rows(seq)
            if self._scratch.shape[0] < self._ids.shape[0]:
                self._scratch = np.full(self._ids.shape[0], -1, dtype=np.intp)
            uniq, inverse = kernels.first_appearance(rows, self._scratch)
            return KeyBatch(self._ids[uniq], self._hashes[uniq], inverse)
        distinct = list(dict.fromkeys(seq))  # distinct keys in order of first appearance (in C)
        pos = dict(zip(distinct, range(len(distinct)), strict=True))
        ids, hashes = self._lookup(distinct)
        return KeyBatch(ids, hashes, np.fromiter(map(pos.__getitem__, seq), np.intp, len(seq)))

    def _encode_buffer(self, keys: KeyBuffer) -> KeyBatch:
        """A :class:`KeyBuffer` hashed whole, compiled (falls back to the keys one by one without numba)."""
        if choice_kernels() is None:  # pragma: no cover - numba is a dependency
            return self.encode(list(keys.keys))
        from router.partitioners.key_hash import hash_buffer

        ids, hashes, inverse = hash_buffer(keys.data, keys.offsets, KEY_ID_SEED, self._seed_array)
        return KeyBatch(ids, hashes, inverse)


def distinct_candidates(hashes: U32, n: int, d: int | None = None) -> npt.NDArray[np.int64]:
    """Map the first ``d`` hash columns to ``d`` distinct combiners in ``[0, n)``.

    Candidate ``j`` is ``hashes[:, j] mod n``; when it equals an earlier candidate it moves to the next
    combiner (mod ``n``) until it is distinct (Storm's rule: candidates never coincide). ``d`` is capped at
    ``n``. Deterministic, so every router computes the same candidates for a key.
    """
    d = hashes.shape[1] if d is None else d
    d = min(d, n, hashes.shape[1])
    cand = (hashes[:, :d].astype(np.int64)) % n
    for j in range(1, d):
        col = cand[:, j]
        for _ in range(j + 1):
            clash = np.zeros(col.shape[0], dtype=bool)
            for i in range(j):
                clash |= col == cand[:, i]
            if not clash.any():
                break
            col = np.where(clash, (col + 1) % n, col)
        cand[:, j] = col
    return cand
