"""D-Choices and W-Choices: heavy hitters' spread, the tail on its two PKG candidates, the derived d."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from benchmarks.workloads import zipf_keys
from router.partitioners import create, distinct_candidates
from router.partitioners.choices import DChoicesPartitioner, choices_for
from router.partitioners.keys import KeyCodec
from router.partitioners.spacesaving import SpaceSaving
from schemas.exceptions import ConfigError

N = 8


def run(name: str, keys: np.ndarray, n: int = N, batch: int = 1000) -> tuple[np.ndarray, list[set[int]], list[int]]:
    """Route ``keys``; also the heavy hitters (ids) and the heavy hitters' width in force for each batch."""
    part = create(name, n, window=60_000, slide=1_000, seed=1)
    enc = KeyCodec(0).encode(keys)
    key_of = dict(zip(enc.ids[enc.inverse].tolist(), keys.tolist(), strict=False))  # id -> key
    out, heavy, width = [], [], []
    for s in range(0, len(keys), batch):
        chunk = keys[s : s + batch]
        out.append(part.assign(chunk, np.arange(s, s + len(chunk))))
        heavy.append({key_of[i] for i in part.heavy_hitters()})  # type: ignore[attr-defined]
        width.append(part.width)  # type: ignore[attr-defined]
    return np.concatenate(out), heavy, width


@pytest.mark.parametrize("name", ["dchoices", "wchoices"])
def test_light_keys_stay_on_their_two_candidates(name: str) -> None:
    keys = zipf_keys(30_000, 1.5, 5_000, 3)
    out, heavy, _ = run(name, keys)
    ever = set().union(*heavy)
    enc = KeyCodec(2).encode(keys)
    cand = distinct_candidates(enc.hashes, N, 2)[enc.inverse]
    light = ~np.isin(keys, list(ever))
    assert light.mean() > 0.2
    on_cand = (out[light] == cand[light, 0]) | (out[light] == cand[light, 1])
    assert on_cand.all()
    per_key: dict[int, set[int]] = defaultdict(set)
    for k, w in zip(keys[light].tolist(), out[light].tolist(), strict=True):
        per_key[k].add(w)
    assert max(len(v) for v in per_key.values()) <= 2


def test_wchoices_spreads_heavy_hitters_over_all_combiners() -> None:
    keys = zipf_keys(30_000, 1.5, 5_000, 3)
    out, heavy, width = run("wchoices", keys)
    assert all(w == N for w in width[1:])
    assert 0 in set().union(*heavy)  # the rank-1 key (~40 % of the stream) is a heavy hitter
    assert np.unique(out[keys == 0]).size == N  # and reaches every combiner
    imb = [np.bincount(out[s : s + 1000], minlength=N).max() / 125 for s in range(0, len(out), 1000)]
    assert np.mean(imb) < 1.1


def test_dchoices_keeps_heavy_hitters_within_d() -> None:
    keys = zipf_keys(30_000, 1.5, 5_000, 3)
    out, heavy, width = run("dchoices", keys)
    assert 2 < max(width) < N
    for b, (hh, d) in enumerate(zip(heavy, width, strict=True)):
        sl = slice(b * 1000, (b + 1) * 1000)
        for k in hh:
            assert np.unique(out[sl][keys[sl] == k]).size <= d
    # over the run, a heavy hitter never leaves its d candidates (the widest d in force)
    assert np.unique(out[keys == 0]).size <= max(width)


def test_choices_for_derives_d_from_the_shares() -> None:
    assert choices_for([], 8) == 2
    assert choices_for([0.5], 8) == 4  # 0.5 / d <= 1/8
    assert choices_for([0.05, 0.04], 8) == 2
    assert choices_for([0.9], 8) == 8  # capped at n
    assert choices_for([0.3, 0.2, 0.2], 16) == 6  # top: d >= 4.8; total 0.7 > 1 - (11/16)^3, <= 1 - (10/16)^3
    assert choices_for([0.4], 2) == 2


def test_theta_default_and_validation() -> None:
    part = create("dchoices", 10)
    assert isinstance(part, DChoicesPartitioner) and part.theta == pytest.approx(1 / 50)
    assert create("wchoices", 4, theta=0.1).params()["theta"] == 0.1
    with pytest.raises(ConfigError, match="theta"):
        create("dchoices", 4, theta=1.5)
    with pytest.raises(ConfigError, match="k_max"):
        create("wchoices", 4, k_max=0)


def test_space_saving_tracks_the_heavy_hitters_without_undercounting_them() -> None:
    """With fewer newcomers per segment than evictable counters, the batched rule keeps the classic guarantee."""
    ss = SpaceSaving(64)
    rng = np.random.default_rng(0)
    truth: dict[int, int] = defaultdict(int)
    for _ in range(500):
        ids, cnt = np.unique(rng.zipf(1.3, 20) % 1000, return_counts=True)
        for i, c in zip(ids.tolist(), cnt.tolist(), strict=True):
            truth[i] += c
        ss.add(ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15), cnt.astype(np.int64))  # 64-bit ids, as keys have
    assert ss.used == 64 and ss.mass == sum(truth.values())
    for k in sorted(truth, key=truth.__getitem__, reverse=True)[:5]:  # the heaviest keys: tracked, never undercounted
        slot = ss.lookup(np.array([k], dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        assert slot[0] >= 0 and ss.counts(slot)[0] >= truth[k]
