"""Route a stream with a partitioner and produce it as routed records, without a router process.

For tests and the benchmark: ``router.partitioners.create(name, n, ...).assign(keys, tuple_counter)`` gives the
combiner of each record, and each record is produced with :func:`schemas.records.encode_routed` to partition
``combiner`` of the combiner topic -- exactly what a router worker writes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from connectors.kafka import make_producer, produce_waiting
from schemas.exceptions import BrokerError
from schemas.records import encode_routed
from schemas.settings import KafkaSettings

__all__ = ["assign_combiners", "produce_routed"]


def assign_combiners(
    keys: Sequence[str],
    partitioner: str,
    n: int,
    *,
    window: float = 60_000,
    slide: float = 1_000,
    seed: int = 0,
    batch: int = 1_000,
) -> npt.NDArray[np.int32]:
    """Combiner ids of ``keys`` (in stream order) under ``partitioner``; windows count tuples."""
    from router.partitioners import create

    part = create(partitioner, n, window=window, slide=slide, seed=seed)
    arr = np.asarray(keys, dtype=object)
    out = np.empty(len(arr), dtype=np.int32)
    for i in range(0, len(arr), batch):
        chunk = arr[i : i + batch]
        out[i : i + len(chunk)] = part.assign(chunk, np.arange(i, i + len(chunk), dtype=np.int64))
    return out


def produce_routed(
    kafka: KafkaSettings,
    topic: str,
    keys: Sequence[str],
    times_ms: Sequence[int],
    measures: Sequence[float | None],
    combiners: Sequence[int] | npt.NDArray[np.int32],
    *,
    raw_topic: str = "raw",
    raw_values: Sequence[bytes] | None = None,
    offsets: Sequence[int] | None = None,
    linger_ms: int = 50,
) -> int:
    """Produce routed records (record ``i`` to partition ``combiners[i]``); returns the count delivered.

    The source position is ``(raw_topic, 0, offsets[i])`` (default: ``i``); give the same offsets twice to
    simulate an at-least-once replay.
    """
    producer = make_producer(kafka, **{"linger.ms": linger_ms, "enable.idempotence": False, "acks": 1})
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for i, (k, t, x, c) in enumerate(zip(keys, times_ms, measures, combiners, strict=True)):
        raw = raw_values[i] if raw_values is not None else b'{"i":%d}' % i
        off = int(offsets[i]) if offsets is not None else i
        value = encode_routed(k, int(t), int(c), raw_topic, 0, off, None if x is None else float(x), raw)
        produce_waiting(producer, topic, value, k.encode(), partition=int(c), on_delivery=on_delivery)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left or errors:
        raise BrokerError(f"producing routed records to {topic!r}: {left} undelivered, errors {errors[:3]}")
    return len(keys)
