"""Key ids and hashes of a whole batch of keys held in one byte buffer, compiled (:func:`hash_buffer`).

The router's compiled JSON scan (:mod:`router.extract_scan`) leaves every key's canonical bytes (a string's
UTF-8, an integer's decimal digits) in one buffer with Arrow-style offsets. :func:`hash_buffer` computes what
:class:`~router.partitioners.keys.KeyCodec` would compute key by key with ``mmh3`` -- the 64-bit id
(MurmurHash3 x64 128, its first half) and the 32-bit candidate hashes (MurmurHash3 x86 32, one per seed) --
and reduces the batch to its distinct ids in order of first appearance. No dict lookup and no cache entry per
key: hashing a short key compiled (about 30 ns) costs half of what looking it up in the codec's cache did.

The arithmetic is the reference algorithm's (little-endian blocks, the same tail and finalisers); the tests
compare every output with ``mmh3`` on random keys, ASCII and not, of every length around the block sizes.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from router.partitioners.accel import compile_loop

__all__ = ["distinct_ids", "hash_buffer", "murmur3_32", "murmur3_64", "warm"]

U64 = npt.NDArray[np.uint64]
U32 = npt.NDArray[np.uint32]

_C1_64 = np.uint64(0x87C37B91114253D5)
_C2_64 = np.uint64(0x4CF5AD432745937F)
_F1_64 = np.uint64(0xFF51AFD7ED558CCD)
_F2_64 = np.uint64(0xC4CEB9FE1A85EC53)
_C1_32 = np.uint32(0xCC9E2D51)
_C2_32 = np.uint32(0x1B873593)
_F1_32 = np.uint32(0x85EBCA6B)
_F2_32 = np.uint32(0xC2B2AE35)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _rotl64(x: np.uint64, r: int) -> np.uint64:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _rotl32(x: np.uint32, r: int) -> np.uint32:
    return np.uint32((x << np.uint32(r)) | (x >> np.uint32(32 - r)))


def _fmix64(k: np.uint64) -> np.uint64:
    k ^= k >> np.uint64(33)
    k *= _F1_64
    k ^= k >> np.uint64(33)
    k *= _F2_64
    k ^= k >> np.uint64(33)
    return k


def _scramble64(k: np.uint64, first: np.uint64, r: int, second: np.uint64) -> np.uint64:
    """A block's (or the tail's) word before it is mixed into its half: multiply, rotate, multiply."""
    return _rotl64(k * first, r) * second


def _scramble32(k: np.uint32) -> np.uint32:
    return np.uint32(_rotl32(np.uint32(k * _C1_32), 15) * _C2_32)


def _read64(buf: npt.NDArray[np.uint8], at: int, count: int) -> np.uint64:
    """``count`` (at most 8) bytes from ``at``, little-endian."""
    v = np.uint64(0)
    for i in range(count):
        v |= np.uint64(buf[at + i]) << np.uint64(8 * i)
    return v


def _read32(buf: npt.NDArray[np.uint8], at: int, count: int) -> np.uint32:
    v = np.uint32(0)
    for i in range(count):
        v |= np.uint32(np.uint32(buf[at + i]) << np.uint32(8 * i))
    return v


def murmur3_64_py(buf: npt.NDArray[np.uint8], lo: int, hi: int, seed: int) -> np.uint64:
    """MurmurHash3 x64 128 of ``buf[lo:hi]``, the first 64 bits (``mmh3.hash64(..., signed=False)[0]``)."""
    length = hi - lo
    h1 = np.uint64(seed)
    h2 = np.uint64(seed)
    at = lo
    for _ in range(length // 16):
        h1 ^= _scramble64(_read64(buf, at, 8), _C1_64, 31, _C2_64)
        h1 = _rotl64(h1, 27)
        h1 += h2
        h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
        h2 ^= _scramble64(_read64(buf, at + 8, 8), _C2_64, 33, _C1_64)
        at += 16
        h2 = _rotl64(h2, 31)
        h2 += h1
        h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
    rest = length & 15
    if rest > 8:
        h2 ^= _scramble64(_read64(buf, at + 8, rest - 8), _C2_64, 33, _C1_64)
    if rest > 0:
        h1 ^= _scramble64(_read64(buf, at, min(rest, 8)), _C1_64, 31, _C2_64)
    h1 ^= np.uint64(length)
    h2 ^= np.uint64(length)
    h1 += h2
    h2 += h1
    h1 = _fmix64(h1)
    h2 = _fmix64(h2)
    return h1 + h2


def murmur3_32_py(buf: npt.NDArray[np.uint8], lo: int, hi: int, seed: int) -> np.uint32:
    """MurmurHash3 x86 32 of ``buf[lo:hi]`` (``mmh3.hash(..., signed=False)``)."""
    length = hi - lo
    h = np.uint32(seed)
    at = lo
    for _ in range(length // 4):
        h ^= _scramble32(_read32(buf, at, 4))
        at += 4
        h = _rotl32(h, 13)
        h = np.uint32(h * np.uint32(5) + np.uint32(0xE6546B64))
    rest = length & 3
    if rest > 0:
        h ^= _scramble32(_read32(buf, at, rest))
    h ^= np.uint32(length)
    h ^= h >> np.uint32(16)
    h = np.uint32(h * _F1_32)
    h ^= h >> np.uint32(13)
    h = np.uint32(h * _F2_32)
    h ^= h >> np.uint32(16)
    return h


def distinct_ids_py(ids: U64) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The first tuple of every distinct id, in order of first appearance, and each tuple's index into them.

    An open-addressing table of twice the batch's size (a power of two), probed linearly.
    """
    m = ids.shape[0]
    size = 16
    while size < 2 * m:
        size *= 2
    mask = np.uint64(size - 1)
    table = np.full(size, -1, np.intp)  # distinct index held by each slot
    first = np.empty(m, np.intp)
    inverse = np.empty(m, np.intp)
    count = 0
    for t in range(m):
        v = ids[t]
        s = np.intp(((v * _GOLD) >> np.uint64(32)) & mask)
        while True:
            j = table[s]
            if j < 0:
                table[s] = count
                first[count] = t
                inverse[t] = count
                count += 1
                break
            if ids[first[j]] == v:
                inverse[t] = j
                break
            s = np.intp((s + 1) & mask)
    return first[:count], inverse


def hash_buffer_py(
    data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int32], id_seed: int, seeds: npt.NDArray[np.uint32]
) -> tuple[U64, U32, npt.NDArray[np.intp]]:
    """Per distinct key of the batch (first appearance): its id and hashes; and each tuple's distinct index.

    Key ``t`` is ``data[offsets[t]:offsets[t + 1]]``.
    """
    m = offsets.shape[0] - 1
    ids = np.empty(m, np.uint64)
    for t in range(m):
        ids[t] = murmur3_64(data, offsets[t], offsets[t + 1], id_seed)
    first, inverse = distinct_ids(ids)
    hashes = np.empty((first.shape[0], seeds.shape[0]), np.uint32)
    for u in range(first.shape[0]):
        t = first[u]
        for j in range(seeds.shape[0]):
            hashes[u, j] = murmur3_32(data, offsets[t], offsets[t + 1], seeds[j])
    return ids[first], hashes, inverse


_rotl64 = compile_loop(_rotl64)
_rotl32 = compile_loop(_rotl32)
_fmix64 = compile_loop(_fmix64)
_scramble64 = compile_loop(_scramble64)
_scramble32 = compile_loop(_scramble32)
_read64 = compile_loop(_read64)
_read32 = compile_loop(_read32)
murmur3_64 = compile_loop(murmur3_64_py)
murmur3_32 = compile_loop(murmur3_32_py)
distinct_ids = compile_loop(distinct_ids_py)
hash_buffer = compile_loop(hash_buffer_py)


@functools.cache
def warm() -> None:
    """Compile (or load from numba's cache) the loops for the argument types the codec passes, once per process."""
    hash_buffer(np.zeros(1, np.uint8), np.array([0, 1], np.int32), 1, np.zeros(2, np.uint32))
