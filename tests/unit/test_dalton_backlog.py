"""One Dalton router catching up on a backlog: Spark's micro-batches then span many slides, keys stay put."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.workloads import zipf_keys
from router import partitioners as P
from router.choose.measure import unaligned_batches
from router.choose.runner import key_owner
from router.partitioners.metrics import measure as measure_windows
from router.partitioners.metrics import replication_floor
from router.plane_clock import WindowClock

TUPLES = 150_000
PER_MS = 5  # tuples per millisecond of event time
SLIDE_MS = 1_000  # 5,000 tuples per slide
MICRO_BATCH = 50_000  # ten slides: a job catching up with maxRecordsPerTrigger
OFFSET = 18_500  # Spark's cut does not fall on a slide's start


def _quality(keys: np.ndarray, out: np.ndarray, n: int) -> tuple[float, float, float]:
    """Max/mean, replication and its floor per micro-batch of the routed order (from ``OFFSET``)."""
    keys, out = keys[OFFSET:], out[OFFSET:]
    full = keys.size // MICRO_BATCH * MICRO_BATCH
    index = np.arange(full) // MICRO_BATCH
    series = measure_windows(keys[:full], out[:full], index, n)
    floor = float(replication_floor(keys[:full], index, n).mean())
    return float(series.ratio.mean()), float(series.replication.mean()), floor


def _route(keys: np.ndarray, n: int, backlog: bool) -> np.ndarray:
    part = P.create("dalton", n=n, window=12 * SLIDE_MS, slide=SLIDE_MS, seed=1)
    part.set_backlog(backlog)
    times = np.arange(keys.size, dtype=np.int64) // PER_MS
    out = np.empty(keys.size, dtype=np.int64)
    for a, b in unaligned_batches(keys.size):
        out[a:b] = part.assign(keys[a:b], times[a:b])
    return out


@pytest.mark.parametrize(("s", "n"), [(0.8, 16), (1.0, 16), (0.8, 32)])
def test_a_router_catching_up_keeps_its_keys_where_the_window_has_them(s: float, n: int) -> None:
    # Placed slide by slide, keys of a few tuples per slide moved whenever a slide's counts filled their
    # combiner: 1.39, 1.17 and 1.87 partials per key per micro-batch (floors 1.000, 1.003, 1.002)
    keys = np.random.default_rng(3).permutation(1_000)[zipf_keys(TUPLES, s, 1_000, 42)]
    ratio, rep, floor = _quality(keys, _route(keys, n, backlog=True), n)
    live_ratio, live_rep, _ = _quality(keys, _route(keys, n, backlog=False), n)
    assert rep <= floor + (0.05 if n <= 16 else 0.12), (ratio, rep, floor)
    assert rep < live_rep - 0.1, (rep, live_rep)
    # a cut inside a slide costs balance whatever the placement (n = 32: 1.064 live); never more than live
    assert ratio <= max(1.05, live_ratio), (ratio, live_ratio)


def test_a_router_reading_a_keyed_topic_in_chunks_keeps_its_keys_in_place() -> None:
    # A worker catching up on a raw topic keyed by the record key reads one chunk per raw partition per batch,
    # and its window clock spreads the batch's event time over them: each slide then holds other partitions'
    # keys than the last, and a plan made on the last slide's counts does not fit the next (1.68 partials per
    # key; 1.03 keeping keys where the window has them)
    n, parts, chunk = 8, 4, 5_000
    keys = np.random.default_rng(3).permutation(1_000)[zipf_keys(TUPLES, 0.8, 1_000, 42)]
    times = np.arange(keys.size, dtype=np.int64) // PER_MS
    feeds = [np.flatnonzero(key_owner(keys, parts) == p) for p in range(parts)]
    batches = [np.concatenate([f[a : a + chunk] for f in feeds]) for a in range(0, max(f.size for f in feeds), chunk)]
    results = []
    for backlog in (True, False):
        part = P.create("dalton", n=n, window=12 * SLIDE_MS, slide=SLIDE_MS, seed=1)
        part.set_backlog(backlog)
        clock, owner = WindowClock(), key_owner(keys, parts).astype(np.int64)
        outs = []
        for i, idx in enumerate(batches):
            outs.append(np.asarray(part.assign(keys[idx], clock.stamp(times[idx], owner[idx], i * 0.05))))
        order = np.concatenate(batches)
        results.append(_quality(keys[order], np.concatenate(outs), n))
    (ratio, rep, floor), (_, live_rep, _) = results
    assert ratio <= 1.05 and rep <= floor + 0.05, (ratio, rep, floor)
    assert live_rep > 1.5, live_rep
