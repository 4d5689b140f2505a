"""Window metrics (per-combiner load, replication) against a brute-force count; metrics exposition."""

from __future__ import annotations

import numpy as np
import pytest

from router.dataplane import make_partitioner
from router.observability import RouterMetrics, WindowStats, WindowTracker
from router.partitioners import available, create
from router.partitioners.keys import KeyCodec
from router.window_distinct import distinct_by_window, distinct_by_window_py
from schemas.settings import RouteSettings


@pytest.mark.parametrize("jump", [0, 10**9])
def test_window_tracker_matches_brute_force(jump: int) -> None:
    rng = np.random.default_rng(1)
    n, slide = 4, 700
    w = WindowTracker(n, slide)
    keys: list[str] = []
    combs: list[int] = []
    clocks: list[int] = []
    done = []
    codec = KeyCodec(0)
    c0 = 0
    for b in range(6):
        size = int(rng.integers(1, 3000))
        ks = [f"k{i}" for i in rng.integers(0, 300, size)]
        cs = rng.integers(0, n, size).astype(np.int32)
        clock = np.arange(c0, c0 + size, dtype=np.int64)
        if b == 3:
            clock += jump  # event time may jump far ahead
        c0 = int(clock[-1]) + 1
        keys += ks
        combs += cs.tolist()
        clocks += clock.tolist()
        enc = codec.encode(ks)
        done += w.observe(enc.ids[enc.inverse], cs, clock)
    assert len(done) >= 5
    win = np.asarray(clocks) // slide
    for st in done:
        idx = np.flatnonzero(win == st.window)
        ks = [keys[i] for i in idx]
        pairs = {(keys[i], combs[i]) for i in idx}
        assert st.keys == len(set(ks)) and st.pairs == len(pairs)
        assert st.loads.tolist() == np.bincount([combs[i] for i in idx], minlength=n).tolist()
        assert st.replication == pytest.approx(len(pairs) / len(set(ks)))


@pytest.mark.parametrize("spread", ["murmur", "same home slot"])
def test_distinct_by_window_matches_sets(spread: str) -> None:
    """Distinct values per window, first appearances in order, compiled and uncompiled alike.

    "same home slot" gives every value the same low bits: the probe chains run through the whole table and
    wrap around its end, and slots written in earlier windows are reused.
    """
    rng = np.random.default_rng(7)
    for size in (1, 17, 3000):
        widx = np.sort(rng.integers(0, 9, size)).astype(np.int64)
        raw = rng.integers(0, 40, size).astype(np.uint64)
        values = raw * np.uint64(0x9E3779B97F4A7C15) if spread == "murmur" else raw << np.uint64(40)
        want_w: list[int] = []
        want_v: list[int] = []
        for w in dict.fromkeys(widx.tolist()):
            firsts = dict.fromkeys(values[widx == w].tolist())
            want_w += [w] * len(firsts)
            want_v += list(firsts)
        for fn in (distinct_by_window, distinct_by_window_py):
            got_w, got_v = fn(widx, values)
            assert got_w.tolist() == want_w and got_v.tolist() == want_v


@pytest.mark.parametrize("name", ["hash", "dalton", "pkg"])
def test_assign_with_ids_is_assign_plus_the_key_ids(name: str) -> None:
    """The window metrics' key ids come with the assignment, which is the one ``assign`` makes."""
    rng = np.random.default_rng(3)
    batches = [[f"k{i}" for i in rng.integers(0, 500, 4000)] for _ in range(3)]
    plain, with_ids = create(name, 8, seed=1), create(name, 8, seed=1)
    for b, keys in enumerate(batches):
        times = np.arange(b * 4000, (b + 1) * 4000, dtype=np.int64)
        out, ids = with_ids.assign_with_ids(keys, times)
        assert out.tolist() == plain.assign(keys, times).tolist()
        per_key = dict(zip(keys, ids.tolist(), strict=True))
        assert len(set(per_key.values())) == len(per_key)  # one id per key, distinct keys distinct ids
        assert all(per_key[k] == i for k, i in zip(keys, ids.tolist(), strict=True))


def test_exposition_names_routes() -> None:
    m = RouterMetrics("w1")
    r = m.route("clicks", "hash", 3)
    r.tuples_in.inc(5)
    r.dead_lettered("user.id")
    text = m.exposition().decode()
    assert 'skewroute_tuples_in_total{route="clicks"} 5.0' in text
    assert 'skewroute_tuples_dead_lettered_total{field="user.id",route="clicks"} 1.0' in text
    assert 'skewroute_route_info{instance="w1",partitioner="hash",route="clicks"} 3.0' in text


def test_a_batchs_windows_are_all_counted_and_the_gauges_show_the_newest() -> None:
    m = RouterMetrics("w1")
    r = m.route("clicks", "hash", 2)
    r.windows_done([WindowStats(0, np.array([4, 4]), 3, 3), WindowStats(1, np.array([2, 6]), 2, 4)])
    r.windows_done([])
    text = m.exposition().decode()
    assert 'skewroute_windows_total{route="clicks"} 2.0' in text
    assert 'skewroute_combiner_load{combiner="1",route="clicks"} 6.0' in text
    assert 'skewroute_window_replication{route="clicks"} 2.0' in text


_SETTINGS: dict[str, dict[str, object]] = {"pkg": {"d": 3}, "cam": {"windowing": "sliding"}, "lm": {"p": 0.3}}


@pytest.mark.parametrize("name", [n for n in available()])
def test_route_settings_create_the_partitioner(name: str) -> None:
    """A route's partitioner settings model (``params()``) is accepted by the algorithm's constructor."""
    route = RouteSettings(raw_topic="t", combiners=6, partitioner={"name": name, **_SETTINGS.get(name, {})})
    part = make_partitioner(route)
    assert part is not None and part.n == 6 and part.name == name
    assert all(0 <= c < 6 for c in part.assign(["a", "b", "a", "c"], [0, 1, 2, 3]).tolist())
