"""The data plane's window clock under a backlog (router.plane_clock.WindowClock).

Under a backlog ``consume()`` returns one chunk per raw partition, each spanning its own stretch of event time. A
running maximum of event times stamped every chunk after the first with the batch's newest time, so whole chunks
fell into one statistics window of Dalton. The clock spreads a batch over the raw partitions' mean advance of
event time, in the order the records are routed -- the order Spark's micro-batches (offset ranges) see them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from benchmarks.workloads import make_workload, zipf_keys
from router.choose.runner import key_owner
from router.partitioners import create
from router.partitioners.metrics import measure as measure_windows
from router.partitioners.metrics import replication_floor
from router.plane_clock import WindowClock

T0 = 1_767_225_600_000
P = 4  # raw partitions (round robin), as the demo produces them
I64 = np.int64


def _batch_clock(times: npt.NDArray[np.int64], last: int) -> npt.NDArray[np.int64]:
    """The clock before (one advance for the whole batch): from the clock to the batch's newest time."""
    base = max(last, int(times.min()) - 1)
    advance = max(0, int(times.max()) - base)
    return base + (np.arange(1, times.size + 1, dtype=I64) * advance) // times.size


def _running_max(times: npt.NDArray[np.int64], last: int) -> npt.NDArray[np.int64]:
    """The clock of an earlier release: running maximum of event times."""
    return np.maximum.accumulate(np.maximum(times, last))


def _chunked(n: int, chunk: int) -> list[npt.NDArray[np.int64]]:
    """Record indices per router batch: ``chunk`` consecutive records of each raw partition, partition by partition."""
    parts = [np.arange(p, n, P) for p in range(P)]
    return [np.concatenate([parts[p][i : i + chunk] for p in range(P)]) for i in range(0, n // P, chunk)]


def _window_counts(clock: npt.NDArray[np.int64], slide_ms: int = 1_000) -> npt.NDArray[np.int64]:
    w = (clock - clock.min()) // slide_ms
    return np.bincount(w - w.min())


def _one(size: int, partition: int = 0) -> npt.NDArray[np.int64]:
    return np.full(size, partition, dtype=I64)


def test_time_ordered_batch_keeps_its_times() -> None:
    times = T0 + np.arange(0, 10_000, 2, dtype=I64)
    clock = WindowClock()
    stamps = clock.stamp(times, _one(times.size), 0.0)  # the first batch starts at its own earliest time, not at 0
    assert stamps[0] >= times[0] - 1 and stamps[-1] == times[-1]
    assert np.all(np.diff(stamps) >= 0)
    assert np.abs(stamps - times).max() <= 2
    nxt = clock.stamp(times + 10_000, _one(times.size), 0.01)
    assert nxt[0] > stamps[-1] and nxt[-1] == times[-1] + 10_000


def test_clock_never_goes_back_and_late_batches_stay_put() -> None:
    clock = WindowClock()
    clock.stamp(np.array([T0], dtype=I64), _one(1), 0.0)
    late = np.array([T0 - 500, T0 - 400], dtype=I64)
    assert clock.stamp(late, _one(2), 0.1).tolist() == [T0, T0]  # no advance: the clock stays where it was
    assert clock.stamp(late, _one(2, 1), 0.2).tolist() == [T0, T0]  # a new partition's 100 ms: not past T0, the newest
    assert clock.stamp(np.zeros(0, dtype=I64), _one(0), 0.3).size == 0 and clock.now == T0


def test_chunked_batch_no_longer_piles_chunks_into_one_window() -> None:
    n, chunk = 40_000, 5_000  # one router batch = 4 chunks of 5,000 records = 4 s of event time at 5,000/s
    times = T0 + (np.arange(n) * 0.2).astype(I64)
    batch = _chunked(n, chunk)[0]
    before = _window_counts(_running_max(times[batch], 0))
    after = _window_counts(WindowClock().stamp(times[batch], batch % P, 0.0))
    assert before.max() >= 3 * chunk  # chunks 2-4 all stamped with the newest time: one window of 15,000
    # the batch advances 4 s of event time: each 1 s window gets a quarter of its 20,000 arrivals
    assert after.max() <= chunk + 1


def _keyed_backlog(parts: int = 8, chunk: int = 5_000, n: int = 200_000) -> tuple[np.ndarray, list[np.ndarray]]:
    """A backlog of a raw topic keyed by a Zipf 1.5 key, 40 s of event time, and the consume batches reading it.

    Each batch takes a chunk of every raw partition with records left, as a consumer's fetches do: the partition
    of the hottest key holds ~40 % of the records and takes many batches, a small one comes whole in the first.
    """
    keys = np.random.default_rng(3).permutation(10_000)[zipf_keys(n, 1.5, 10_000, 42)]
    owner = key_owner(keys, parts)
    feeds = [np.flatnonzero(owner == p) for p in range(parts)]
    longest = max(f.size for f in feeds)
    return keys, [np.concatenate([f[a : a + chunk] for f in feeds if a < f.size]) for a in range(0, longest, chunk)]


def test_a_small_raw_partition_delivered_whole_does_not_end_the_backlog() -> None:
    keys, batches = _keyed_backlog()
    times = T0 + np.arange(keys.size, dtype=I64) // 5  # 5,000 records per second of event time
    owner = key_owner(keys, 8)
    clock, last, new, old = WindowClock(), 0, [], []
    for i, idx in enumerate(batches):
        new.append(clock.stamp(times[idx], owner[idx], i * 0.05))
        old.append(_batch_clock(times[idx], last))
        last = int(old[-1][-1])
    before, after = _window_counts(np.concatenate(old)), _window_counts(np.concatenate(new))
    # before: the first batch holds whole small partitions and takes the clock to the backlog's end; every later
    # batch of the large ones is stamped in the last slide, one window of 160,000 records instead of 5,000
    assert before.max() >= 150_000
    assert after.max() <= 25_000 and after.size >= 39  # the 40 slides each get a share
    assert clock.now >= times.max() - 100  # the backlog's end is reached: the last slide's end, at the partitions' mean


@pytest.mark.parametrize("silent", ["nothing", "old records"])
def test_a_partition_that_does_not_advance_does_not_slow_the_clock_down(silent: str) -> None:
    clock = WindowClock(recent_s=1.0)
    clock.stamp(np.array([T0], dtype=I64), _one(1, 3), 0.0)  # partition 3 delivers once, then nothing new
    for step in range(1, 41):  # live: partitions 0-2 deliver every 100 ms, each at the pace of wall clock
        wall = step * 0.1
        times = T0 + step * 100 - np.array([66, 33, 0] * 3, dtype=I64)
        parts = np.repeat(np.arange(3, dtype=I64), 3)
        if silent == "old records":  # partition 3 keeps sending its first record's time
            times, parts = np.append(times, T0), np.append(parts, 3)
        stamps = clock.stamp(times, parts, wall)
        if step > 10:  # partitions 0-2 are the ones whose fronts moved: the clock keeps at their pace
            assert stamps[-1] == T0 + step * 100, step
    # partition 3 counted in the first second held the mean back by a quarter; the lowest moving front caught up


def test_a_partition_back_after_a_pause_cannot_push_the_clock_past_the_newest_record() -> None:
    clock = WindowClock(recent_s=1.0, forget_s=10.0)
    clock.stamp(T0 + np.arange(0, 1_000, dtype=I64), _one(1_000, 0), 0.0)
    clock.stamp(T0 + np.arange(0, 1_000, dtype=I64), _one(1_000, 1), 0.0)
    # partition 1 pauses for a minute of event time: its front stays; back, it advanced 60 s, partition 0 1 s
    back = clock.stamp(T0 + 60_000 + np.arange(2, dtype=I64), np.array([1, 1], dtype=I64), 5.0)
    assert back[-1] <= T0 + 60_001  # its own records are the newest: the clock never passes them
    # forgotten after forget_s: a partition delivering again counts only its own advance from its first record
    clock.stamp(T0 + 70_000 + np.arange(10, dtype=I64), _one(10, 0), 20.0)
    assert clock.now == T0 + 70_009  # the whole batch is past the clock: it starts at its earliest time


def _spark_view(chunk: int, clock: str, n: int = 60_000, micro_batch: int = 20_000) -> float:
    """Dalton's mean max/mean records per combiner over arrival-order micro-batches (what Spark's tasks get)."""
    wl = make_workload(f"zipf:s=1.5,keys=10000,tuples={n},batch={n},seed=1")
    ids = np.concatenate([k for k, _ in wl.batches()])[:n]
    keys = np.array([f"k{i}" for i in ids], dtype=object)
    times = T0 + (np.arange(n) * 0.2).astype(I64)
    part = create("dalton", 8, window=60_000, slide=1_000, seed=1)
    last, out, wc = 0, [], WindowClock()
    for i, b in enumerate(_chunked(n, chunk)):
        c = _running_max(times[b], last) if clock == "max" else wc.stamp(times[b], b % P, i * 0.05)
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


def test_dalton_catching_up_on_a_keyed_backlog_balances_the_micro_batches_spark_reads() -> None:
    # 40 slides of a keyed backlog, read by a consumer chunk by chunk; micro-batches of 50,000 records (ten
    # slides). With the clock before, the backlog ended in the first batch and the rest fell in one slide:
    # max/mean 1.217 per micro-batch (replication 1.021, floor 1.007); now 1.065 (1.038)
    keys, batches = _keyed_backlog()
    times = T0 + np.arange(keys.size, dtype=I64) // 5
    owner = key_owner(keys, 8)
    part = create("dalton", 8, window=12_000, slide=1_000, seed=1)
    part.set_backlog(True)
    clock, outs = WindowClock(), []
    for i, idx in enumerate(batches):
        outs.append(np.asarray(part.assign(keys[idx], clock.stamp(times[idx], owner[idx], i * 0.05))))
    routed, out = keys[np.concatenate(batches)], np.concatenate(outs)
    index = np.arange(routed.size) // 50_000
    series = measure_windows(routed, out, index, 8)
    floor = float(replication_floor(routed, index, 8).mean())
    ratio, rep = float(series.ratio.mean()), float(series.replication.mean())
    assert ratio <= 1.07 and rep <= floor + 0.05, (ratio, rep, floor)


def test_the_data_plane_stamps_by_raw_partition() -> None:
    from router.dataplane import RouteDataPlane
    from router.extract_fields import Extracted
    from router.observability import RouterMetrics
    from schemas.settings import KafkaSettings, RouterSettings, RouteSettings

    route = RouteSettings.model_validate({"raw_topic": "raw", "partitioner": {"name": "hash"}})
    plane = RouteDataPlane(KafkaSettings(), RouterSettings(), route, RouterMetrics("w"), instance_id="w")
    start = T0 - 3_600_000  # an hour's backlog
    # one batch: 1,000 records of raw partition 0 over its first second, then all 1,000 of partition 1 (40 s)
    times = [start + i for i in range(1_000)] + [start + 40 * i for i in range(1_000)]
    parts = [0] * 1_000 + [1] * 1_000
    ext = Extracted([f"k{i}" for i in range(2_000)], times, [None] * 2_000, [b"{}"] * 2_000, parts, list(range(2_000)))
    plane._assign(ext, T0 + 3_600_000)
    # the mean advance of the two partitions (1 s and 40 s): 20.5 s, not the batch's 40 s
    assert abs(plane._event_clock.now - (start + 20_479)) <= 1, plane._event_clock.now - start
