"""Keys hashed whole from one byte buffer (``router.partitioners.key_hash``): the same ids, hashes and decisions."""

from __future__ import annotations

import random

import mmh3
import numpy as np
import pytest

from router.partitioners import create
from router.partitioners.key_hash import distinct_ids, distinct_ids_py, hash_buffer, hash_buffer_py
from router.partitioners.keys import KEY_ID_SEED, KeyBuffer, KeyCodec, key_bytes

# the uncompiled twins do the hashes' modular arithmetic on numpy scalars, which warn when they wrap
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def _buffer(keys: list[str]) -> KeyBuffer:
    raw = [key_bytes(k) for k in keys]
    offsets = np.zeros(len(raw) + 1, np.int32)
    offsets[1:] = np.cumsum([len(b) for b in raw])
    return KeyBuffer(np.frombuffer(b"".join(raw), np.uint8).copy(), offsets, keys)


def _random_keys(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = "ab7_-é€\U0001f600 \t\"'"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(count)]


@pytest.mark.parametrize("fn", [hash_buffer, hash_buffer_py], ids=["compiled", "python"])
def test_ids_and_hashes_are_mmh3s_for_every_length(fn: object) -> None:
    # lengths 0..39 cover the 16-byte blocks and every tail of both hashes; keys repeat, and are not all ASCII
    keys = _random_keys(600, 1) + ["", "k1", "123", "k1"]
    buf = _buffer(keys)
    seeds = np.array([42, 46, 7], np.uint32)
    ids, hashes, inverse = fn(buf.data, buf.offsets, KEY_ID_SEED, seeds)  # type: ignore[operator]
    raw = [key_bytes(k) for k in keys]
    assert ids[inverse].tolist() == [mmh3.hash64(b, KEY_ID_SEED, signed=False)[0] for b in raw]
    assert hashes[inverse].tolist() == [[mmh3.hash(b, int(s), signed=False) for s in seeds] for b in raw]


def test_distinct_ids_keep_the_order_of_first_appearance() -> None:
    ids = np.array([9, 3, 9, 2**63 + 5, 3, 3, 0, 2**64 - 1, 0], np.uint64)
    for fn in (distinct_ids, distinct_ids_py):
        first, inverse = fn(ids)
        assert first.tolist() == [0, 1, 3, 6, 7]
        assert inverse.tolist() == [0, 1, 0, 2, 1, 1, 3, 4, 3]
    rng = np.random.default_rng(3)
    many = rng.integers(0, 2**63, 5_000, dtype=np.int64).astype(np.uint64)[rng.integers(0, 5_000, 40_000)]
    first, inverse = distinct_ids(many)
    assert (many[first][inverse] == many).all()
    assert np.unique(many).size == first.size


def test_the_codec_gives_a_buffer_the_batch_it_gives_the_keys() -> None:
    keys = _random_keys(3_000, 2) + [str(i) for i in range(50)]  # digits: an integer key's canonical bytes
    codec = KeyCodec(2)
    a, b = codec.encode(keys), codec.encode(_buffer(keys))
    assert a.ids.tolist() == b.ids.tolist()
    assert a.hashes.tolist() == b.hashes.tolist()
    assert a.inverse.tolist() == b.inverse.tolist()
    assert codec.encode(list(range(50))).ids.tolist() == codec.encode(_buffer([str(i) for i in range(50)])).ids.tolist()


def test_a_buffer_reads_as_its_keys() -> None:
    # a partitioner that reads the keys themselves (the benchmarks' pass-through, a plug-in) gets the str keys
    buf = _buffer(["a", "bé", "a"])
    assert (
        len(buf) == 3
        and list(buf) == ["a", "bé", "a"]
        and buf[1] == "bé"
        and list(map(hash, buf)) == [hash("a"), hash("bé"), hash("a")]
    )


@pytest.mark.parametrize("name", ["hash", "pkg", "dalton", "fish", "cam"])
def test_a_partitioner_decides_the_same_on_a_buffer(name: str) -> None:
    rng = np.random.default_rng(4)
    keys = [f"k{int(i)}" for i in rng.zipf(1.5, 30_000) % 5_000]
    times = np.arange(len(keys), dtype=np.int64)
    one = create(name, 8, window=12_000, slide=1_000, seed=1)
    two = create(name, 8, window=12_000, slide=1_000, seed=1)
    for lo in range(0, len(keys), 7_000):
        chunk = keys[lo : lo + 7_000]
        got, ids = two.assign_with_ids(_buffer(chunk), times[lo : lo + len(chunk)])
        want, want_ids = one.assign_with_ids(chunk, times[lo : lo + len(chunk)])
        assert np.array_equal(got, want)
        assert np.array_equal(ids, want_ids)
