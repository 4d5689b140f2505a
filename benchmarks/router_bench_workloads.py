"""The workloads of ``skewroute router-bench``: which keys, which record values, and where the records live.

A workload draws ``n`` keys over :data:`KEYS` distinct keys (Zipf with the workload's exponent, or uniform)
and turns record ``i`` with key ``k`` into the small JSON value ``{"key":"k<k>","v":<i>}``, spread round-robin
over :data:`RAW_PARTITIONS` raw partitions. The keyed workloads (:data:`KEYED_WORKLOADS`) also write ``k<k>`` as
each record's Kafka key, and their routes take the key from there (``key.source: kafka_key``). The field
workloads (:data:`FIELD_WORKLOADS`) write ``{"key":"k<k>","t":<ms>,"v":<i>}`` and their routes read the event
time from ``t`` and a measure from ``v``, the shape of the demo's and ``e2e-bench``'s routes; ``zipf1.5-prices``
is the same with measures of two decimal places (``"v":123.45``, the decimal measure layout of routed format 2).
The end-to-end sections route a topic preloaded with it (:func:`preload`); the hot-path profile routes the same
records as in-memory Kafka messages (:func:`in_memory_messages`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "ALL_WORKLOADS",
    "FIELD_WORKLOADS",
    "KEYED_WORKLOADS",
    "KEYS",
    "PRICE_WORKLOADS",
    "RAW_PARTITIONS",
    "WORKLOADS",
    "in_memory_messages",
    "preload",
    "workload_keys",
]

#: workload name -> Zipf exponent (0: uniform)
WORKLOADS = {"zipf1.5": 1.5, "uniform": 0.0}
#: the same records with Kafka keys, routed on them (run when asked for by name)
KEYED_WORKLOADS = {"zipf1.5-keyed": 1.5, "uniform-keyed": 0.0}
#: the same keys with an event time and a measure in the value, routed on them (run when asked for by name)
FIELD_WORKLOADS = {"zipf1.5-fields": 1.5, "uniform-fields": 0.0}
#: a field workload whose measures have two decimal places, like prices (run when asked for by name)
PRICE_WORKLOADS = {"zipf1.5-prices": 1.5}
ALL_WORKLOADS = {**WORKLOADS, **KEYED_WORKLOADS, **FIELD_WORKLOADS, **PRICE_WORKLOADS}
#: the field workloads' first event time (ms); record ``i`` is ``i`` ms later
T0_MS = 1_700_000_000_000
KEYS = 10_000
RAW_PARTITIONS = 4


def workload_keys(n: int, s: float, seed: int) -> list[int]:
    """``n`` key indices in ``[0, KEYS)``: Zipf with exponent ``s``, uniform when ``s`` is 0."""
    from benchmarks.workloads import zipf_probabilities

    rng = np.random.default_rng(seed)
    keys = rng.choice(KEYS, size=n, p=zipf_probabilities(KEYS, s)) if s > 0 else rng.integers(0, KEYS, n)
    return list(keys.tolist())


def _value(key: int, i: int, workload: str) -> bytes:
    if workload in PRICE_WORKLOADS:
        return b'{"key":"k%d","t":%d,"v":%d.%02d}' % (key, T0_MS + i, i // 100, i % 100)
    if workload in FIELD_WORKLOADS:
        return b'{"key":"k%d","t":%d,"v":%d}' % (key, T0_MS + i, i)
    return b'{"key":"k%d","v":%d}' % (key, i)


def key_source(workload: str) -> str:
    """How the workload's routes read their records: ``field``, ``kafka_key`` or ``fields`` (see the module)."""
    if workload in KEYED_WORKLOADS:
        return "kafka_key"
    return "fields" if workload in FIELD_WORKLOADS or workload in PRICE_WORKLOADS else "field"


def route_fields(source: str) -> dict[str, Any]:
    """The route settings that read a record as :func:`key_source` names it."""
    if source == "fields":
        return {"key": {"source": "field"}, "time": {"source": "field", "field": "t", "unit": "ms"}, "value_field": "v"}
    return {"key": {"source": source}}


def preload(bootstrap: str, topic: str, n: int, workload: str, seed: int) -> None:
    """Create ``topic`` with :data:`RAW_PARTITIONS` partitions and write ``workload``'s ``n`` records to it.

    The keyed workloads write each record's Kafka key ``k<k>`` too; the field workloads write values with an
    event time and a measure.
    """
    from connectors.admin import TopicSpec, ensure_topics
    from connectors.kafka import make_admin, make_producer, produce_waiting
    from schemas.settings import KafkaSettings

    kafka = KafkaSettings(bootstrap_servers=bootstrap)
    ensure_topics(make_admin(kafka), [TopicSpec(topic, RAW_PARTITIONS)])
    p = make_producer(kafka, **{"linger.ms": 20})
    keyed = workload in KEYED_WORKLOADS
    for i, k in enumerate(workload_keys(n, ALL_WORKLOADS[workload], seed)):
        produce_waiting(p, topic, _value(k, i, workload), b"k%d" % k if keyed else None, partition=i % RAW_PARTITIONS)
    if p.flush(120) != 0:
        raise RuntimeError(f"preloading {topic} did not finish")


def in_memory_messages(n: int, workload: str, seed: int) -> list[Any]:
    """``workload``'s records as real ``confluent_kafka.Message`` objects built in memory (topic ``raw``)."""
    from confluent_kafka import Message

    return [
        Message(topic="raw", partition=i % RAW_PARTITIONS, offset=i // RAW_PARTITIONS, value=_value(k, i, workload),
                timestamp=(1, T0_MS + i))
        for i, k in enumerate(workload_keys(n, ALL_WORKLOADS[workload], seed))
    ]  # fmt: skip
