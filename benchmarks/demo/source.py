"""The demo's input: a seeded workload turned into JSON records, produced to the raw topic at a set rate.

The workload gives the keys (synthetic ids, flight destinations, words...); the demo gives every record an
event time on its own clock (``T0 + i / rate``, so event time advances like the wall clock while producing)
and an integer measure (integers sum exactly in doubles, so the exactness check can ask for equality).
The same :class:`DemoInput` is produced once per partitioner and is the reference of the exactness check.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from benchmarks.demo.options import KEY_FIELD, RAW_PARTITIONS, TIME_FIELD, VALUE_FIELD
from benchmarks.workloads import make_workload
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin, make_producer, produce_waiting
from schemas.exceptions import BrokerError
from schemas.settings import KafkaSettings

__all__ = ["T0_MS", "DemoInput", "Producer", "build_input"]

#: Event time of the first record: a multiple of every window length used (windows start at T0 + k * size).
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class DemoInput:
    """The produced records, in production order: key, event time (ms), measure."""

    workload: str
    description: str
    keys: npt.NDArray[np.str_]
    times: npt.NDArray[np.int64]
    values: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def encoded(self, fields: tuple[str, str, str] = (KEY_FIELD, TIME_FIELD, VALUE_FIELD)) -> list[bytes]:
        """The JSON value of every record, with ``fields`` naming its key, time and value.

        Each value is copied out of ``orjson.dumps``' result: orjson returns bytes that keep about 4 KB of
        allocation each, so holding millions of them (a rate phase) took ~4 KB per record instead of ~70 B.
        """
        kf, tf, vf = fields
        return [
            bytes(memoryview(orjson.dumps({kf: k, tf: t, vf: v})))
            for k, t, v in zip(self.keys.tolist(), self.times.tolist(), self.values.tolist(), strict=True)
        ]


def build_input(spec: str, records: int, rate: float, seed: int) -> DemoInput:
    """``records`` records of workload ``spec`` (its own ``tuples``/``seed`` are set by the demo)."""
    workload = make_workload(spec, tuples=records, seed=seed)
    parts: list[np.ndarray] = []
    total = 0
    for keys, _times in workload.batches():
        parts.append(np.asarray(keys).astype(str))
        total += len(keys)
        if total >= records:
            break
    keys = np.concatenate(parts)[:records] if parts else np.zeros(0, dtype=str)
    step_ms = 1000.0 / rate if rate > 0 else 1000.0 / 5_000  # unthrottled: 5,000 records per event second
    times = T0_MS + np.floor(np.arange(len(keys)) * step_ms).astype(np.int64)
    values = np.random.default_rng(seed + 17).integers(0, 1000, size=len(keys), dtype=np.int64)
    return DemoInput(workload.name, workload.description or workload.name, keys, times, values)


class Producer:
    """Produces a :class:`DemoInput` round-robin over the raw partitions on a thread, at ``rate`` records/s.

    ``sent`` counts records handed to Kafka; ``first_s`` / ``done_s`` are ``time.time()`` of the first record
    and of the final flush; ``error`` holds what stopped it early.
    """

    def __init__(self, kafka: KafkaSettings, topic: str, data: DemoInput, rate: float) -> None:
        self.kafka, self.topic, self.data, self.rate = kafka, topic, data, rate
        self.values = self._encode(data)
        self.sent = 0
        self.first_s: float | None = None
        self.done_s: float | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)

    def _encode(self, data: DemoInput) -> list[bytes]:
        """The records' Kafka values (a hook for subclasses)."""
        return data.encoded()

    @staticmethod
    def create_topic(kafka: KafkaSettings, topic: str) -> None:
        """Create the raw topic with :data:`RAW_PARTITIONS` partitions."""
        ensure_topics(make_admin(kafka), [TopicSpec(topic, RAW_PARTITIONS)])

    def start(self) -> Producer:
        """Start producing."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop early (Ctrl-C)."""
        self._stop.set()
        self._thread.join(10)

    @property
    def done(self) -> bool:
        """Whether every record was produced and acknowledged."""
        return self.done_s is not None

    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by the pipeline
            self.error = exc

    #: seconds between two pacing checks, and the longest wait for the last acknowledgements
    tick_s = 0.02
    flush_s = 60.0

    def _client(self) -> Any:
        return make_producer(self.kafka, **{"linger.ms": 10})

    def _send(self, producer: Any, i: int, key: bytes) -> None:
        produce_waiting(producer, self.topic, self.values[i], key, partition=i % RAW_PARTITIONS)

    def _sent_upto(self, lo: int, hi: int) -> None:
        """Records ``lo..hi-1`` were just handed to the client (a hook for subclasses)."""

    def _produce(self) -> None:
        producer = self._client()
        keys = [k.encode() for k in self.data.keys.tolist()]
        total = len(self.values)
        self.first_s = start = time.time()
        while self.sent < total and not self._stop.is_set():
            due = total if self.rate <= 0 else min(total, int((time.time() - start) * self.rate) + 1)
            for i in range(self.sent, due):
                self._send(producer, i, keys[i])
            self._sent_upto(self.sent, due)
            self.sent = max(self.sent, due)
            producer.poll(0)
            if self.rate > 0 and self.sent < total:
                time.sleep(self.tick_s)
        left = producer.flush(self.flush_s)
        if left:
            raise BrokerError(f"{left} records to {self.topic!r} were not acknowledged")
        if self.sent == total:
            self.done_s = time.time()
