"""Kafka offset helpers for the Spark data source: true partition ends, offset specs, read budgets.

Why probing: Tansu (our embedded broker) reports a partition's high watermark as *the start of its last
record batch + 1*, so every record of the last producer batch but its first stays invisible through
``get_watermark_offsets``. :func:`probe_ends` finds the true end of each partition by consuming from
``max(start, high_watermark - 1)`` (the start of the last batch, never beyond the true end) until librdkafka
emits its partition-EOF event, whose offset is the true end. The records read by the probe are dropped; a
probe reads at most the last producer batch plus what arrived since, and stops early once ``cap`` records
past ``start`` are known to exist (the micro-batch cannot take more anyway). On a broker whose watermarks are
exact (Apache Kafka) the probe starts at ``high - 1`` and costs one record per partition.

Every client here uses manual ``assign()`` (no consumer-group join) and only lists *all* topics (asking for one
unknown topic's metadata makes Tansu auto-create it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from connectors.offset_ranges import Offsets
from schemas.exceptions import BrokerError

__all__ = [
    "EARLIEST",
    "LATEST",
    "Offsets",
    "make_probe_consumer",
    "parse_starting_offsets",
    "probe_ends",
    "topic_partitions",
]

#: Spark's conventions in a JSON offsets spec.
EARLIEST = -2
LATEST = -1


def make_probe_consumer(conf: Mapping[str, Any]) -> Consumer:
    """A consumer for probes and reads: no group join, no commits, EOF events on."""
    return Consumer(
        {
            "group.id": "skewroute-spark-source",  # required by librdkafka; never joined (assign only)
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 20,
            "max.partition.fetch.bytes": 16 << 20,  # big fetches: one task reads a whole combiner partition
            "fetch.max.bytes": 64 << 20,
            "queued.max.messages.kbytes": 256 << 10,
            "socket.connection.setup.timeout.ms": 5000,
            **conf,
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


def probe_ends(
    consumer: Consumer,
    starts: Offsets,
    *,
    cap: int | None = None,
    timeout: float = 5.0,
) -> Offsets:
    """The true end offset of every partition in ``starts`` (capped at ``start + cap`` when ``cap`` is given).

    See the module docstring for why watermarks are not enough. A partition whose EOF does not arrive within
    ``timeout`` gets the highest offset seen + 1 (at least the watermark), so a slow broker delays records to
    the next micro-batch but never skips any.
    """
    ends: Offsets = {t: {} for t in starts}
    probe: list[TopicPartition] = []
    for t, parts in starts.items():
        for p, start in parts.items():
            lo, hi = consumer.get_watermark_offsets(TopicPartition(t, int(p)), timeout=timeout, cached=False)
            start = max(start, lo)
            if cap is not None and start + cap <= hi - 1:
                ends[t][p] = start + cap  # offsets below hi - 1 exist: no need to look at the tail
                continue
            ends[t][p] = max(start, hi)
            probe.append(TopicPartition(t, int(p), max(start, hi - 1)))
    if not probe:
        return ends
    pending = {(tp.topic, tp.partition) for tp in probe}
    consumer.assign(probe)
    try:
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(10_000, timeout=0.1):
                key = (m.topic(), m.partition())
                off = m.offset() or 0
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if key in pending:
                            ends[key[0]][str(key[1])] = max(ends[key[0]][str(key[1])], off)
                            pending.discard(key)
                        continue
                    raise BrokerError(f"probing {key[0]}[{key[1]}]: {err.str()}")
                if key not in pending:
                    continue
                ends[key[0]][str(key[1])] = max(ends[key[0]][str(key[1])], off + 1)
                if cap is not None and off + 1 >= starts[key[0]][str(key[1])] + cap:
                    pending.discard(key)
    finally:
        consumer.unassign()
    if cap is not None:
        for t, parts in ends.items():
            for p, e in parts.items():
                parts[p] = min(e, starts[t][p] + cap)
    return ends
