"""router-bench's hot-path profile: per-record CPU cost of each phase of the batch loop, without a broker.

The Python side of the loop alone, per configuration and workload: ``Extractor.extract``, ``assign`` (the
partitioner, or the source partition for pass-through), ``encode_routed`` + ``produce()`` into librdkafka's
queue. Real ``confluent_kafka.Message`` objects are built in memory and the producer's broker does not exist
(librdkafka queues the records), so only the worker's own Python/C work is measured, in thread CPU time.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.planes import PASSTHROUGH, PassThrough
from benchmarks.router_bench_workloads import WORKLOADS, in_memory_messages

__all__ = ["hotpath_table"]


def _once(msgs: list[Any], name: str, batch: int, combiners: int) -> list[float]:
    """Thread CPU seconds of extract, assign, encode+produce over ``msgs`` for one configuration."""
    from confluent_kafka import Producer

    from router.dataplane import make_partitioner
    from router.extract import Extractor
    from schemas.records import encode_routed
    from schemas.settings import RouteSettings

    route = RouteSettings(
        raw_topic="raw",
        combiners=combiners,
        window={"kind": "count", "size": 60_000, "slide": 1_000},
        partitioner={"name": "hash" if name == PASSTHROUGH else name},
    )
    part = PassThrough(combiners) if name == PASSTHROUGH else make_partitioner(route, name)
    ex = Extractor(route)
    prod = Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 2 * len(msgs) + 10,
                     "queue.buffering.max.kbytes": 4_000_000, "message.timeout.ms": 600_000})  # fmt: skip
    t_ex = t_as = t_pr = 0.0
    for lo in range(0, len(msgs), batch):
        chunk = msgs[lo : lo + batch]
        a = time.thread_time()
        e = ex.extract(chunk)
        b = time.thread_time()
        cs = part.assign(e.keys).tolist()
        c = time.thread_time()
        for k, t, cc, p, o, x, v in zip(e.keys, e.times, cs, e.partitions, e.offsets, e.measures, e.values,
                                        strict=True):  # fmt: skip
            prod.produce("out", encode_routed(k, t, cc, "raw", p, o, x, v), k, partition=cc)
        d = time.thread_time()
        t_ex, t_as, t_pr = t_ex + b - a, t_as + c - b, t_pr + d - c
    prod.purge()
    return [t_ex, t_as, t_pr]


def hotpath_table(n: int, names: list[str], batch: int, combiners: int, repeats: int = 3) -> list[str]:
    """The profile's Markdown table: µs per tuple per phase, best of ``repeats``, per workload and configuration."""
    out = [
        "| workload | configuration | extract | assign | encode + produce | total µs/tuple | tuples per CPU-second |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for wl, s in WORKLOADS.items():
        msgs = in_memory_messages(n, s, seed=1)
        for name in names:
            best: list[float] | None = None
            for _ in range(repeats):  # fresh partitioner each time; the fastest repetition is the least disturbed
                times = _once(msgs, name, batch, combiners)
                best = times if best is None or sum(times) < sum(best) else best
            assert best is not None
            t_ex, t_as, t_pr = best
            total = t_ex + t_as + t_pr
            out.append(
                f"| {wl} | {name} | {1e6 * t_ex / n:.2f} | {1e6 * t_as / n:.2f} | {1e6 * t_pr / n:.2f} | "
                f"{1e6 * total / n:.2f} | {n / total:,.0f} |"
            )
            print(out[-1], flush=True)
    return out
