"""The data plane's window clock under a backlog: per-partition chunks in one batch (plane_parts.window_clock).

Under a backlog ``consume()`` returns one chunk per raw partition, each spanning the same stretch of event time.
A running maximum of event times stamped every chunk after the first with the batch's newest time, so whole
chunks fell into one statistics window of Dalton. The arrival-order clock spreads the batch over its advance
of event time in the order the records are routed -- the order Spark's micro-batches (offset ranges) see them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from benchmarks.workloads import make_workload
from router.partitioners import create
from router.plane_parts import window_clock

T0 = 1_767_225_600_000
P = 4  # raw partitions (round robin), as the demo produces them


def _running_max(times: npt.NDArray[np.int64], last: int) -> npt.NDArray[np.int64]:
    """The clock before: running maximum of event times."""
    return np.maximum.accumulate(np.maximum(times, last))


def _chunked(n: int, chunk: int) -> list[npt.NDArray[np.int64]]:
    """Record indices per router batch: ``chunk`` consecutive records of each raw partition, partition by partition."""
    parts = [np.arange(p, n, P) for p in range(P)]
    return [np.concatenate([parts[p][i : i + chunk] for p in range(P)]) for i in range(0, n // P, chunk)]


def _window_counts(clock: npt.NDArray[np.int64], slide_ms: int = 1_000) -> npt.NDArray[np.int64]:
    w = (clock - clock.min()) // slide_ms
    return np.bincount(w - w.min())


def test_time_ordered_batch_keeps_its_times() -> None:
    times = T0 + np.arange(0, 10_000, 2, dtype=np.int64)
    clock = window_clock(times, 0)  # the first batch starts at its own earliest time, not at 0
    assert clock[0] >= times[0] - 1 and clock[-1] == times[-1]
    assert np.all(np.diff(clock) >= 0)
    assert np.abs(clock - times).max() <= 2
    nxt = window_clock(times + 10_000, int(clock[-1]))
    assert nxt[0] > clock[-1] and nxt[-1] == times[-1] + 10_000


def test_clock_never_goes_back_and_late_batches_stay_put() -> None:
    late = np.array([T0 - 500, T0 - 400], dtype=np.int64)
    assert window_clock(late, T0).tolist() == [T0, T0]  # no advance: the clock stays where it was
    assert window_clock(np.zeros(0, dtype=np.int64), T0).size == 0


def test_chunked_batch_no_longer_piles_chunks_into_one_window() -> None:
    n, chunk = 40_000, 5_000  # one router batch = 4 chunks of 5,000 records = 4 s of event time at 5,000/s
    times = T0 + (np.arange(n) * 0.2).astype(np.int64)
    batch = _chunked(n, chunk)[0]
    before = _window_counts(_running_max(times[batch], 0))
    after = _window_counts(window_clock(times[batch], 0))
    assert before.max() >= 3 * chunk  # chunks 2-4 all stamped with the newest time: one window of 15,000
    # the batch advances 4 s of event time: each 1 s window gets a quarter of its 20,000 arrivals
    assert after.max() <= chunk + 1


def _spark_view(chunk: int, clock: str, n: int = 60_000, micro_batch: int = 20_000) -> float:
    """Dalton's mean max/mean records per combiner over arrival-order micro-batches (what Spark's tasks get)."""
    wl = make_workload(f"zipf:s=1.5,keys=10000,tuples={n},batch={n},seed=1")
    ids = np.concatenate([k for k, _ in wl.batches()])[:n]
    keys = np.array([f"k{i}" for i in ids], dtype=object)
    times = T0 + (np.arange(n) * 0.2).astype(np.int64)
    part = create("dalton", 8, window=60_000, slide=1_000, seed=1)
    last, out = 0, []
    for b in _chunked(n, chunk):
        c = _running_max(times[b], last) if clock == "max" else window_clock(times[b], last)
        last = int(c[-1])
        out.append(part.assign(keys[b], c))
    comb = np.concatenate(out)
    loads = [np.bincount(comb[i : i + micro_batch], minlength=8) for i in range(0, n, micro_batch)]
    return float(np.mean([x.max() / x.mean() for x in loads]))


def test_dalton_balance_as_spark_sees_it_under_chunked_batches() -> None:
    for chunk in (2_500, 5_000):
        arrival = _spark_view(chunk, "arrival")
        assert arrival <= 1.05, (chunk, arrival)
        assert arrival <= _spark_view(chunk, "max") + 0.01, chunk
