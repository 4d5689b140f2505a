"""Worker data planes for router-bench, and the interleaved pass-through/partitioner pair.

Two worker processes run one after the other can differ by 40 % on the shared development host: its speed
flips between a fast and a slow state every few seconds (even the thread CPU time of identical work moves by
that much). :func:`run_pair` therefore runs a pass-through route and one partitioner's route in one process,
taking turns batch by batch (a turn is ~0.1 s): a slow spell hits both routes alike. Each route is a complete
data plane of a worker (:class:`~router.dataplane.RouteDataPlane`: its own consumer group, producer and combiner
topic; a turn is one ``_batch``: consume, extract, assign, produce, wait for the previous batch's
acknowledgements, commit). A route's time is the sum of its own turns from its first record to the
acknowledgement and commit of its last batch; its rate is records / that time.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any

from benchmarks.planes import PASSTHROUGH, BoundedDataPlane, PassThrough
from benchmarks.router_bench_workloads import route_fields
from router.dataplane import RouteDataPlane
from router.plane_parts import tune_gc

__all__ = ["SLIDE", "drop_combiner_topic", "make_plane", "pair_table", "run_pair", "topic_bytes", "window"]

#: The routes' default window slide (tuples): a partitioner's scope, e.g. Dalton's plan (a stress setting: a
#: route's slide is the Spark trigger, whose micro-batches hold many more tuples)
SLIDE = 1_000


def window(slide: int) -> dict[str, Any]:
    """The routes' count window: ``slide`` tuples, over at least 60,000 (and 12 slides)."""
    return {"kind": "count", "size": max(60_000, 12 * slide), "slide": slide}


def make_plane(
    bootstrap: str,
    raw: str,
    name: str,
    *,
    n: int,
    batch: int,
    combiners: int,
    producer_conf: str,
    routed_format: int = 2,
    key_source: str = "field",
    slide: int = SLIDE,
) -> RouteDataPlane:
    """A data plane routing ``raw`` with ``name`` (a partitioner or :data:`PASSTHROUGH`) into a fresh combiner topic.

    ``key_source``: how the route reads a record (``field``: the value's ``key``; ``kafka_key``; ``fields``: the
    value's ``key``, event time ``t`` and measure ``v``), as :func:`benchmarks.router_bench_workloads.key_source`.
    """
    from connectors.admin import ensure_route_topics
    from router.observability import RouterMetrics
    from schemas.settings import SkewrouteSettings

    tag = f"{name}-{os.getpid()}-{time.time_ns()}"
    s = SkewrouteSettings.load(
        kafka={"bootstrap_servers": bootstrap, "producer": json.loads(producer_conf)},
        router={
            "app_id": f"bench-{tag}",
            "batch_max_records": batch,
            "log_level": "WARNING",
            "routed_format": routed_format,
        },
        routes=[
            {
                "raw_topic": raw,
                "name": f"r-{tag}",
                "combiner_topic": f"{raw}.c.{tag}",
                "dead_letter_topic": f"{raw}.dlq",
                "combiners": combiners,
                "window": window(slide),
                "partitioner": {"name": "hash" if name == PASSTHROUGH else name},
                **route_fields(key_source),
            }
        ],
    )
    route = s.routes[0]
    ensure_route_topics(s.kafka, route)
    part = PassThrough(combiners) if name == PASSTHROUGH else None
    return BoundedDataPlane(
        s.kafka, s.router, route, RouterMetrics(tag), instance_id=tag, partitioner=part, stop_after=n
    )


def topic_bytes(kafka: Any, topic: str, expected: int) -> float:
    """Mean Kafka key + value bytes per record of ``topic`` (read whole after the timed run)."""
    from benchmarks.topic_reader import read_topic

    recs = read_topic(kafka, topic, expected=expected, idle_s=2.0)
    return sum(len(r.key or b"") + len(r.value or b"") for r in recs) / max(len(recs), 1)


def drop_combiner_topic(plane: RouteDataPlane) -> None:
    """Delete the plane's combiner topic (keeps the in-memory broker small between runs)."""
    from connectors.kafka import make_admin

    make_admin(plane.kafka).delete_topics([plane.route.combiner_topic_name])


def _in_hand(plane: RouteDataPlane) -> int:
    """Records the plane took from Kafka so far (committed, plus the batch in flight)."""
    pending = plane._pending  # noqa: SLF001 - the benchmark drives the loop itself
    return plane.stats.consumed + (pending.consumed if pending is not None else 0)


def run_pair(
    bootstrap: str,
    raw: str,
    partitioner: str,
    *,
    n: int,
    batch: int,
    combiners: int,
    producer_conf: str = "{}",
    timeout: float = 300.0,
    key_source: str = "field",
    slide: int = SLIDE,
) -> dict[str, dict[str, Any]]:
    """Route the first ``n`` records of ``raw`` with pass-through and with ``partitioner``, turn by turn."""
    names = [PASSTHROUGH, partitioner]
    planes = [
        make_plane(bootstrap, raw, x, n=n, batch=batch, combiners=combiners, producer_conf=producer_conf,
                   key_source=key_source, slide=slide)
        for x in names
    ]  # fmt: skip
    tune_gc()  # as the worker does once its data planes are built (router.app)
    spent = [0.0, 0.0]
    cpu = [0.0, 0.0]
    deadline = time.monotonic() + timeout
    ready: list[RouteDataPlane] = []
    try:
        for p in planes:
            p._setup()  # noqa: SLF001 - the benchmark drives the loop itself
            ready.append(p)
        while any(p.stats.consumed < n for p in planes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"pair {names} did not route {n} records in time")
            for i, p in enumerate(planes):
                if p.stats.consumed >= n:
                    continue
                start, c0 = time.monotonic(), time.thread_time()
                if _in_hand(p) >= n:
                    p._complete()  # noqa: SLF001 - the last batch: acknowledgements and commit
                else:
                    p._batch()  # noqa: SLF001
                if p.stats.first_consumed is not None:  # the group join before the first record is excluded
                    spent[i] += time.monotonic() - max(start, p.stats.first_consumed)
                    cpu[i] += time.thread_time() - c0
    finally:
        for p in ready:
            p._close()  # noqa: SLF001
        for p in planes:
            drop_combiner_topic(p)
    return {
        x: {
            "ok": p.stats.consumed >= n,
            "consumed": p.stats.consumed,
            "routed": p.stats.routed,
            "elapsed": spent[i],
            "rate": p.stats.consumed / spent[i] if spent[i] > 0 else 0.0,
            "thread_cpu_us": 1e6 * cpu[i] / max(p.stats.consumed, 1),
            "partitioner_us": 1e6 * p.stats.partitioner_s / max(p.stats.consumed, 1),
        }
        for i, (x, p) in enumerate(zip(names, planes, strict=True))
    }


def pair_table(pairs: dict[str, dict[str, list[dict[str, Any]]]], rounds: int) -> list[str]:
    """The report section of the interleaved pairs (one table per workload)."""
    if not pairs:
        return []
    out = [
        f"## Pass-through and each partitioner in one worker process, turn by turn ({rounds} rounds)",
        "",
        "Each round runs one process with two complete data planes (own consumer group, producer, combiner "
        "topic) that take turns batch by batch; the ratio is the configuration's rate / the pass-through rate of "
        "the same process (median over rounds, and the lowest round). Main-thread CPU and the partitioner's "
        "share are µs per tuple. Both routes share the process (two sets of librdkafka threads), so the absolute "
        "rates are below a worker with one route: the separate-process section gives those.",
        "",
    ]
    for wl, per in pairs.items():
        out += [
            f"### {wl}",
            "",
            "| configuration | tuples/s (median) | pass-through, same process | ratio (median) | lowest round |"
            " main-thread CPU µs/tuple | pass-through | partitioner µs/tuple |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, runs in per.items():
            good = [r for r in runs if name in r and r[name].get("ok") and r[PASSTHROUGH].get("ok")]
            if not good:
                err = next((r.get("error") for r in runs), "not run")
                out.append(f"| {name} | failed | {str(err).splitlines()[-1][:80] if err else ''} |" + " |" * 5)
                continue
            ratios = [r[name]["rate"] / r[PASSTHROUGH]["rate"] for r in good]

            def med(who: str, key: str, good: list[dict[str, Any]] = good) -> float:
                return statistics.median(r[who][key] for r in good)

            out.append(
                f"| {name} | {med(name, 'rate'):,.0f} | {med(PASSTHROUGH, 'rate'):,.0f} | "
                f"{statistics.median(ratios):.2f} | {min(ratios):.2f} | {med(name, 'thread_cpu_us'):.2f} | "
                f"{med(PASSTHROUGH, 'thread_cpu_us'):.2f} | {med(name, 'partitioner_us'):.2f} |"
            )
        out.append("")
    return out
