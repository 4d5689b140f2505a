"""Kafka offset helpers for the Spark data source: true partition ends and offset specs.

Why probing: Tansu (our embedded broker) reports a partition's high watermark as *the start of its last
record batch + 1*, so every record of the last producer batch but its first stays invisible through
``get_watermark_offsets``. :func:`probe_partitions` finds the true end of each partition by consuming from
``high_watermark - 1`` (the start of the last batch, an offset that always exists) until librdkafka emits its
partition-EOF event, whose offset is the true end. The records read by the probe are dropped; a probe reads at
most the last producer batch plus what arrived since. Starting there rather than at the caller's start means a
start beyond a recreated or truncated partition's end shows up as an end below it (data loss), never as a
fetch that resets to offset 0. On a broker whose watermarks are exact (Apache Kafka) the probe costs one
record per partition.

SETTLE (only when the caller asks, ``settle=True``: a streaming micro-batch's plan): a partition is settled by
the first records the probe gets for it, when they reach its start. Waiting for the EOF event instead chased a
partition still being written: the event comes only when a fetch finds the consumer caught up, and on Tansu,
whose watermark lags by the last batch, that took 0.8-2.9 s while four routers wrote the topic. Each partition
was then read to a different moment: a micro-batch held up to 1.3x the mean records on one combiner and the next
one made up for it (BENCHMARKS.md). The first records are not always all there is: a partition was found 1,280
records short of its end after the whole topic had been written. For a micro-batch that only moves records to
the next one. Where an end must be the whole partition (the target of an ``availableNow`` query, which stops
when a plan brings nothing new; a batch read; ``startingOffsets`` latest), the probe waits for the EOF event. A
partition whose records stay below its start (recreated or truncated) always waits for it, which says so for
certain.

Low watermarks come from :func:`watermarks`: Tansu's is the first offset of the batch it wrote first, which
with several producers on one partition can lie past records it holds; Tansu keeps every record, so there the
log starts at 0.

Every client here uses manual ``assign()`` (no consumer-group join) and only lists *all* topics (asking for one
unknown topic's metadata makes Tansu auto-create it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from connectors.broker_traits import is_tansu_cluster
from connectors.offset_ranges import Offsets
from schemas.exceptions import BrokerError

__all__ = [
    "EARLIEST",
    "LATEST",
    "is_tansu",
    "Offsets",
    "DRIVER_PROBE_CONF",
    "PROBE_POLL_S",
    "make_probe_consumer",
    "parse_starting_offsets",
    "Probe",
    "probe_ends",
    "probe_partitions",
    "topic_partitions",
    "watermarks",
]

#: Spark's conventions in a JSON offsets spec.
EARLIEST = -2
LATEST = -1


def is_tansu(consumer: Any, timeout: float = 10.0) -> bool:
    """Whether ``consumer``'s broker is Tansu (its cluster id; one metadata request listing every topic)."""
    return is_tansu_cluster(consumer.list_topics(timeout=timeout).cluster_id)


def watermarks(
    consumer: Any, tps: Sequence[TopicPartition], timeout: float = 10.0, *, tansu: bool | None = None
) -> list[tuple[int, int]]:
    """``(log start, high watermark)`` of each of ``tps``, asked of the broker (never librdkafka's cache).

    The log start is the low watermark, except on Tansu (the cluster id says): its low watermark is the first
    offset of the batch with the oldest write time, and a fetch returns only the batches that start at or after
    the offset asked. With several producers writing one partition, the batch written first can come after
    another in the log (a results topic written by two Spark tasks had a low watermark of 1 while it held
    offsets 0 to 37, and a reader starting there got 23 to 37). Tansu has no retention, so its log starts at 0.
    ``tansu``: the broker's kind if the caller knows it (else asked: :func:`is_tansu`).
    """
    if not tps:
        return []
    zero = is_tansu(consumer, timeout) if tansu is None else tansu
    out = []
    for tp in tps:
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        out.append((0 if zero else low, high))
    return out


#: How long one ``consume()`` of a probe waits. librdkafka returns a batch when it holds the number of messages
#: asked for or when this runs out, and a probe cannot know how many records the last batches hold, so each
#: call waits all of it: at 0.1 s, every probe (one per micro-batch) took at least 0.1 s (BENCHMARKS.md).
PROBE_POLL_S = 0.005

#: The driver's consumer only probes: a fetch at a partition's end comes back empty (and brings the EOF event)
#: after at most this wait instead of the readers' 20 ms. The caller's settings override it.
DRIVER_PROBE_CONF: dict[str, Any] = {"fetch.wait.max.ms": 5}


def make_probe_consumer(conf: Mapping[str, Any]) -> Consumer:
    """A consumer for probes and reads: no group join, no commits, EOF events on."""
    return Consumer(
        {
            "group.id": "skewroute-spark-source",  # required by librdkafka; never joined (assign only)
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 20,
            # librdkafka's default (1 s) postpones a fetch while its queue counts as full, so a pooled consumer
            # given its next range could wait that long for its first records: a straggler task (BENCHMARKS.md)
            "fetch.queue.backoff.ms": 20,
            "max.partition.fetch.bytes": 16 << 20,  # big fetches: one task reads a whole combiner partition
            "fetch.max.bytes": 64 << 20,
            "queued.max.messages.kbytes": 256 << 10,
            "socket.connection.setup.timeout.ms": 5000,
            **conf,
            # a missing offset is an error event (data loss), never a silent jump to the partition's start
            "auto.offset.reset": "error",
        }
    )


def topic_partitions(consumer: Consumer, topics: list[str], timeout: float = 10.0) -> dict[str, int]:
    """Partition count of every topic (listing *all* topics, see the module docstring); missing raises."""
    md = consumer.list_topics(timeout=timeout)
    out: dict[str, int] = {}
    for t in topics:
        tmd = md.topics.get(t)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            raise BrokerError(f"topic {t!r} does not exist (known: {len(md.topics)} topics)")
        out[t] = len(tmd.partitions)
    return out


def parse_starting_offsets(spec: str, topics: list[str]) -> dict[str, dict[str, int]] | str:
    """``earliest``/``latest``, or a JSON dict ``{"topic": {"0": 42, "1": -2}}`` (-2 earliest, -1 latest)."""
    s = spec.strip()
    if s in ("earliest", "latest"):
        return s
    try:
        raw = json.loads(s)
    except json.JSONDecodeError as exc:
        raise ValueError(f"startingOffsets must be earliest, latest or a JSON dict, got {spec!r}") from exc
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise ValueError(f'startingOffsets JSON must look like {{"topic": {{"0": 42}}}}, got {spec!r}')
    unknown = set(raw) - set(topics)
    if unknown:
        raise ValueError(f"startingOffsets names topics not subscribed: {', '.join(sorted(unknown))}")
    return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}


@dataclass
class Probe:
    """What a probe found: true ends, low watermarks, and which ends were confirmed by a partition-EOF event."""

    ends: Offsets
    lows: Offsets
    exact: set[tuple[str, str]] = field(default_factory=set)


def probe_partitions(
    consumer: Consumer,
    starts: Offsets,
    *,
    cap: int | None = None,
    timeout: float = 5.0,
    tansu: bool | None = None,
    settle: bool = False,
) -> Probe:
    """The true end of every partition in ``starts`` (see the module docstring), never assumed >= its start.

    The probe reads from the start of each partition's last batch (``high - 1``, or ``low`` when empty), which
    always exists, so a checkpointed start beyond a recreated or truncated partition's end shows as an end
    below the start (``exact``: confirmed by EOF) instead of a fetch error. With ``cap``, a partition with at
    least ``cap`` records past its start below ``high - 1`` gets ``start + cap`` without probing. A partition
    is settled by its EOF event, or with ``settle`` by the first records that reach its start (SETTLE in the
    module doc). One settled by neither within ``timeout`` gets the highest offset seen + 1 (at least the
    watermark) and is not ``exact``: a slow broker delays records to the next micro-batch but never skips any.
    ``tansu``: as in :func:`watermarks`.
    """
    res = Probe({t: {} for t in starts}, {t: {} for t in starts})
    probe: list[TopicPartition] = []
    tps = [TopicPartition(t, int(p)) for t, parts in starts.items() for p in parts]
    marks = iter(watermarks(consumer, tps, timeout=max(timeout, 10.0), tansu=tansu))
    for t, parts in starts.items():
        for p, start in parts.items():
            lo, hi = next(marks)
            res.lows[t][p] = lo
            if cap is not None and max(start, lo) + cap <= hi - 1:
                res.ends[t][p] = max(start, lo) + cap  # offsets below hi - 1 exist: no need to look at the tail
                continue
            res.ends[t][p] = hi
            probe.append(TopicPartition(t, int(p), max(lo, hi - 1)))
    if not probe:
        return res
    pending = {(tp.topic, tp.partition) for tp in probe}
    consumer.assign(probe)
    try:
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            answered: set[tuple[str, int]] = set()
            for m in consumer.consume(10_000, timeout=PROBE_POLL_S):
                key = (m.topic(), m.partition())
                off = m.offset() or 0
                err = m.error()
                if key not in pending:
                    continue
                t, p = key[0], str(key[1])
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        res.ends[t][p] = max(res.ends[t][p], off)
                        res.exact.add((t, p))
                        pending.discard(key)
                        continue
                    raise BrokerError(f"probing {t}[{p}]: {err.str()}")
                res.ends[t][p] = max(res.ends[t][p], off + 1)
                answered.add(key)
                if cap is not None and off + 1 >= max(starts[t][p], res.lows[t][p]) + cap:
                    pending.discard(key)
            if not settle:
                continue
            for key in answered & pending:  # see SETTLE in the module docstring
                t, p = key[0], str(key[1])
                if res.ends[t][p] >= starts[t][p]:
                    pending.discard(key)
    finally:
        consumer.unassign()
    if cap is not None:
        for t, parts in res.ends.items():
            for p, e in parts.items():
                parts[p] = min(e, max(starts[t][p], res.lows[t][p]) + cap)
    return res


def probe_ends(
    consumer: Consumer, starts: Offsets, *, cap: int | None = None, timeout: float = 5.0, tansu: bool | None = None
) -> Offsets:
    """:func:`probe_partitions`' ends (each partition to its EOF event), raised to at least ``max(start, low)``."""
    res = probe_partitions(consumer, starts, cap=cap, timeout=timeout, tansu=tansu)
    return {t: {p: max(e, starts[t][p], res.lows[t][p]) for p, e in parts.items()} for t, parts in res.ends.items()}
