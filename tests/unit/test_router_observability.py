"""Window metrics (per-combiner load, replication) against a brute-force count; metrics exposition."""

from __future__ import annotations

import numpy as np
import pytest

from router.dataplane import make_partitioner
from router.observability import RouterMetrics, WindowTracker, key_hashes
from router.partitioners import available
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
        done += w.observe(key_hashes(ks), cs, clock)
    assert len(done) >= 5
    win = np.asarray(clocks) // slide
    for st in done:
        idx = np.flatnonzero(win == st.window)
        ks = [keys[i] for i in idx]
        pairs = {(keys[i], combs[i]) for i in idx}
        assert st.keys == len(set(ks)) and st.pairs == len(pairs)
        assert st.loads.tolist() == np.bincount([combs[i] for i in idx], minlength=n).tolist()
        assert st.replication == pytest.approx(len(pairs) / len(set(ks)))


def test_exposition_names_routes() -> None:
    m = RouterMetrics("w1")
    r = m.route("clicks", "hash", 3)
    r.tuples_in.inc(5)
    r.dead_lettered("user.id")
    text = m.exposition().decode()
    assert 'skewroute_tuples_in_total{route="clicks"} 5.0' in text
    assert 'skewroute_tuples_dead_lettered_total{field="user.id",route="clicks"} 1.0' in text
    assert 'skewroute_route_info{instance="w1",partitioner="hash",route="clicks"} 3.0' in text


_SETTINGS: dict[str, dict[str, object]] = {"pkg": {"d": 3}, "cam": {"windowing": "sliding"}, "lm": {"p": 0.3}}


@pytest.mark.parametrize("name", [n for n in available()])
def test_route_settings_create_the_partitioner(name: str) -> None:
    """A route's partitioner settings model (``params()``) is accepted by the algorithm's constructor."""
    route = RouteSettings(raw_topic="t", combiners=6, partitioner={"name": name, **_SETTINGS.get(name, {})})
    part = make_partitioner(route)
    assert part is not None and part.n == 6 and part.name == name
    assert all(0 <= c < 6 for c in part.assign(["a", "b", "a", "c"], [0, 1, 2, 3]).tolist())
