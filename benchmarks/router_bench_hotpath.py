"""router-bench's hot-path profile: per-record CPU cost of each phase of the batch loop, without a broker.

The worker's own code for one batch, per configuration, workload (the plain ones and the field ones, whose
routes read an event time and a measure from the value) and routed wire format
(:class:`benchmarks.planes.OfflinePlane`): extract, assign (the partitioner, the window clock and the window
metrics, as in the worker), and produce (encode + ``produce()``/``produce_batch()`` into librdkafka's queue).
Real ``confluent_kafka.Message`` objects are built in memory and the producer's broker does not exist
(librdkafka queues the records), so only the worker's own Python/C work on the data-plane thread is measured,
in thread CPU time; librdkafka's threads (batching, compression, sending) are not in these figures.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.planes import PASSTHROUGH, OfflinePlane, PassThrough
from benchmarks.router_bench_pair import SLIDE, window
from benchmarks.router_bench_workloads import FIELD_WORKLOADS, WORKLOADS, in_memory_messages, key_source, route_fields

__all__ = ["hotpath_table"]

FORMATS = (1, 2)


def _once(msgs: list[Any], name: str, batch: int, combiners: int, fmt: int, slide: int, source: str) -> list[float]:
    """Thread CPU seconds of extract, assign, produce over ``msgs`` for one configuration.

    ``source``: how the route reads a record (:func:`benchmarks.router_bench_workloads.key_source`).
    """
    from confluent_kafka import Producer

    from router.observability import RouterMetrics
    from router.plane_parts import make_partitioner
    from schemas.settings import KafkaSettings, RouterSettings, RouteSettings

    route = RouteSettings(
        raw_topic="raw",
        combiners=combiners,
        window=window(slide),
        partitioner={"name": "hash" if name == PASSTHROUGH else name},
        **route_fields(source),
    )
    part = PassThrough(combiners) if name == PASSTHROUGH else make_partitioner(route, name)
    router = RouterSettings(routed_format=fmt, batch_max_records=batch)
    plane = OfflinePlane(KafkaSettings(), router, route, RouterMetrics("hot"), instance_id="hot", partitioner=part)
    plane.producer = Producer({"bootstrap.servers": "127.0.0.1:1", "queue.buffering.max.messages": 2 * len(msgs) + 10,
                               "queue.buffering.max.kbytes": 4_000_000, "message.timeout.ms": 600_000,
                               "linger.ms": 5, "batch.size": 1_000_000, "batch.num.messages": 100_000})  # fmt: skip
    t_ex = t_as = t_pr = 0.0
    for lo in range(0, len(msgs), batch):
        chunk = msgs[lo : lo + batch]
        a = time.thread_time()
        ext, limit_ms = plane._extract(chunk)
        b = time.thread_time()
        cs = plane._assign(ext, limit_ms)
        c = time.thread_time()
        plane.produce(ext, cs)
        d = time.thread_time()
        t_ex, t_as, t_pr = t_ex + b - a, t_as + c - b, t_pr + d - c
    plane.producer.purge()
    return [t_ex, t_as, t_pr]


def hotpath_table(
    n: int, names: list[str], batch: int, combiners: int, slide: int = SLIDE, repeats: int = 3
) -> list[str]:
    """The profile's Markdown table: µs per tuple per phase, best of ``repeats``, per workload/configuration/format."""
    out = [
        "| workload | configuration | format | extract | assign | produce | total µs/tuple | tuples per CPU-second |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for wl in [*WORKLOADS, *FIELD_WORKLOADS]:
        msgs = in_memory_messages(n, wl, seed=1)
        for name in names:
            for fmt in FORMATS:
                best: list[float] | None = None
                for _ in range(repeats):  # fresh partitioner each time; the fastest repetition is the least disturbed
                    times = _once(msgs, name, batch, combiners, fmt, slide, key_source(wl))
                    best = times if best is None or sum(times) < sum(best) else best
                assert best is not None
                t_ex, t_as, t_pr = best
                total = t_ex + t_as + t_pr
                out.append(
                    f"| {wl} | {name} | {fmt} | {1e6 * t_ex / n:.2f} | {1e6 * t_as / n:.2f} | {1e6 * t_pr / n:.2f} | "
                    f"{1e6 * total / n:.2f} | {n / total:,.0f} |"
                )
                print(out[-1], flush=True)
    return out
