"""Building blocks of soak runs and of the reliability tests.

A raw-record producer, a verifier of the combiner topic, a watcher of the Dalton control topic, router worker
configs, and killing a process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml
from confluent_kafka import KafkaError, TopicPartition

from benchmarks.demo.processes import Child
from benchmarks.topic_reader import read_topic
from connectors.kafka import make_consumer, make_producer, produce_waiting
from schemas.records import decode_routed_record
from schemas.settings import KafkaSettings

__all__ = ["ControlWatcher", "RawProducer", "Verifier", "kill_group", "worker_config"]


def kill_group(child: Child, timeout: float = 10.0) -> None:
    """SIGKILL ``child`` and everything it started (its own session/process group); wait until it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.proc.pid, signal.SIGKILL)
    child.proc.wait(timeout)


def worker_config(
    path: Path,
    bootstrap: str,
    raw_topic: str,
    *,
    app_id: str,
    instance: str,
    state_dir: Path,
    partitioner: dict[str, Any] | None = None,
    combiners: int = 4,
    router: dict[str, Any] | None = None,
    route: dict[str, Any] | None = None,
    spark: dict[str, Any] | None = None,
    kafka: dict[str, Any] | None = None,
) -> Path:
    """Write a router worker's YAML settings (one route over ``raw_topic``) and return the path."""
    cfg = {
        "kafka": {"bootstrap_servers": bootstrap, **(kafka or {})},
        "router": {
            "app_id": app_id,
            "instance_id": instance,
            "state_dir": str(state_dir),
            "log_format": "json",
            **(router or {}),
        },
        "routes": [
            {
                "raw_topic": raw_topic,
                "combiners": combiners,
                "partitioner": partitioner or {"name": "hash"},
                **(route or {}),
            }
        ],  # fmt: skip
        "spark": spark or {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


class Verifier:
    """Reads a combiner topic (all partitions, from the beginning) and checks the source positions.

    ``seen`` counts routed records per source position ``(tp, p, o)``; deduplication on it is what makes the
    downstream aggregates exact after a router replay. :meth:`poll` reads what is there; safe to call from
    one thread at a time.
    """

    def __init__(
        self, kafka: KafkaSettings, topic: str, partitions: int, isolation_level: str = "read_committed"
    ) -> None:
        self.topic = topic
        self.seen: Counter[tuple[str, int, int]] = Counter()
        self.records = 0
        self.bad = 0
        self.first: dict[tuple[str, int, int], dict[str, Any]] = {}
        self._consumer = make_consumer(
            kafka,
            f"skewroute-verifier-{uuid.uuid4().hex[:10]}",
            **{"fetch.wait.max.ms": 20, "isolation.level": isolation_level},
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])  # benchmarks/topic_reader.py
        self._keep_values = False
        self.kafka, self._isolation = kafka, isolation_level
        self.stepped_past = 0  # positions only a fresh reader found (see wait_for)

    def keep_values(self) -> Verifier:
        """Also keep the first routed value per source position (tests compare them with the input)."""
        self._keep_values = True
        return self

    def poll(self, timeout: float = 0.2) -> int:
        """Read the records available within ``timeout`` seconds; the number read."""
        n = 0
        for m in self._consumer.consume(10_000, timeout):
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.bad += 1
                continue
            d = decode_routed_record(m.value(), m.key(), m.topic() or "", m.partition() or 0) or {}
            try:
                pos = (str(d["tp"]), int(d["p"]), int(d["o"]))
            except (KeyError, TypeError, ValueError):
                self.bad += 1
                continue
            self.seen[pos] += 1
            if self._keep_values and pos not in self.first:
                self.first[pos] = d
            n += 1
        self.records += n
        return n

    def wait_for(self, positions: set[tuple[str, int, int]], timeout: float) -> bool:
        """Poll until every one of ``positions`` was seen (``True``) or ``timeout`` seconds passed.

        Positions still missing then are looked for once more by a fresh reader (:meth:`recover`): on Tansu a
        reader that fetches while several transactional producers write one partition can step past a batch the
        topic does hold (router/DATAPLANE.md, "What Tansu does with transactions"). What the topic holds is what
        is checked; :attr:`stepped_past` counts what only the fresh reader saw.
        """
        deadline = time.monotonic() + timeout
        while True:
            missing = sum(1 for p in positions if p not in self.seen)
            if missing == 0:
                return True
            if time.monotonic() > deadline:
                self.recover(positions - set(self.seen))
                return all(p in self.seen for p in positions)
            self.poll(0.5)

    def recover(self, positions: set[tuple[str, int, int]], timeout: float = 30.0) -> int:
        """Add the copies of ``positions`` a fresh reader finds in the topic; how many positions it found."""
        found = 0
        for r in read_topic(self.kafka, self.topic, idle_s=1.0, timeout_s=timeout, isolation_level=self._isolation):
            d = decode_routed_record(r.value, r.key, self.topic, r.partition) or {}
            try:
                pos = (str(d["tp"]), int(d["p"]), int(d["o"]))
            except (KeyError, TypeError, ValueError):
                continue
            if pos not in positions:
                continue
            found += pos not in self.seen
            self.seen[pos] += 1
            self.records += 1
            if self._keep_values and pos not in self.first:
                self.first[pos] = d
        self.stepped_past += found
        return found

    @property
    def duplicates(self) -> int:
        """Routed records beyond the first per source position."""
        return self.records - len(self.seen)

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


#: Poison pills of the soak's injector: (raw value, Kafka timestamp ahead of now in ms, 0 = now). Each is bad
#: for a route keyed on the field ``key`` with Kafka timestamps as event times (the soak's route).
POISON: list[tuple[bytes, int]] = [
    (b'{"key": ', 0),  # not JSON
    (b'{"i": 1}', 0),  # no key
    (b'{"key": 1.5}', 0),  # key of the wrong type
    (b'{"key": "\xff"}', 0),  # not UTF-8
    (b"[1, 2]", 0),  # not an object
    (b'{"key": "far-future"}', 2 * 86_400_000),  # two days ahead of the wall clock
    (b'{"key": "big", "pad": "' + b"x" * 950_000 + b'"}', 0),  # above max_record_bytes: a DLQ envelope
]


class RawProducer:
    """Writes JSON raw records ``{"key", "i", "x"}`` (Zipf keys) at ``rate`` per second on a thread.

    ``acked`` holds the source position ``(topic, partition, offset)`` of every record the broker acknowledged,
    ``failed`` counts the ones it did not. Injectors (off by default, settable while running): with
    ``poison_every = N`` every N-th record is a poison pill (:data:`POISON`, cycled; its acknowledged position
    goes to ``poison_acked``, not ``acked``); ``hot_fraction`` sends that share of the records to one hot key.
    """

    def __init__(self, kafka: KafkaSettings, topic: str, rate: float, *, partitions: int = 4, seed: int = 0) -> None:
        self.kafka, self.topic, self.rate, self.partitions = kafka, topic, rate, partitions
        self.acked: set[tuple[str, int, int]] = set()
        self.failed = 0
        self.sent = 0
        self._rng = np.random.default_rng(seed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._producer = make_producer(kafka, **{"linger.ms": 5, "message.timeout.ms": 30_000})
        self.poison_every = 0
        self.hot_fraction = 0.0
        self.poison_acked: set[tuple[str, int, int]] = set()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is None:
                self.acked.add((msg.topic(), msg.partition(), msg.offset()))
            else:
                self.failed += 1

    def _on_poison(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is None:
                self.poison_acked.add((msg.topic(), msg.partition(), msg.offset()))
            else:
                self.failed += 1

    def send(self, n: int) -> None:
        """Produce ``n`` records now (round-robin over the partitions) without waiting for them."""
        keys = (self._rng.zipf(1.5, n) % 1000).tolist()
        hot = (self._rng.random(n) < self.hot_fraction).tolist() if self.hot_fraction > 0 else [False] * n
        for k, is_hot in zip(keys, hot, strict=True):
            i = self.sent
            value = orjson.dumps({"key": "hot" if is_hot else f"k{k}", "i": i, "x": i % 100})
            ts, cb = 0, self._on_delivery
            if self.poison_every and i % self.poison_every == self.poison_every - 1:
                value, ahead_ms = POISON[(i // self.poison_every) % len(POISON)]
                ts, cb = (int(time.time() * 1000) + ahead_ms if ahead_ms else 0), self._on_poison
            produce_waiting(self._producer, self.topic, value, partition=i % self.partitions, timestamp=ts,
                            on_delivery=cb)  # fmt: skip
            self.sent += 1
        self._producer.poll(0)

    def _loop(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * self.rate) - self.sent
            if due > 0:
                self.send(due)
            self._producer.poll(0.02)

    def start(self) -> RawProducer:
        """Produce at ``rate`` on a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, name="soak-producer", daemon=True)
        self._thread.start()
        return self

    def stop(self, flush_s: float = 60.0) -> None:
        """Stop producing and wait for the outstanding acknowledgements."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self._producer.flush(flush_s)

    def positions(self) -> set[tuple[str, int, int]]:
        """A copy of the acknowledged source positions."""
        with self._lock:
            return set(self.acked)


class ControlWatcher:
    """Follows a control topic: the reducer of each GLOBAL, with the time it arrived (for takeover times)."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.globals: list[tuple[float, str, int]] = []  # (arrival monotonic, reducer, round)
        self.dsync_ms = 0  # the sync interval of the last GLOBAL (adaptive: the liveness timeout is 3 x DSYNC)
        self._consumer = make_consumer(kafka, f"skewroute-watch-{uuid.uuid4().hex[:10]}", **{"fetch.wait.max.ms": 20})
        self._consumer.assign([TopicPartition(topic, 0, 0)])  # offset 0: benchmarks/topic_reader.py

    def poll(self, timeout: float = 0.0) -> None:
        """Read what is there."""
        for m in self._consumer.consume(1000, timeout):
            if m.error() is not None:
                continue
            try:
                d = orjson.loads(m.value() or b"")
            except orjson.JSONDecodeError:
                continue
            if isinstance(d, dict) and d.get("type") == "global":
                self.globals.append((time.monotonic(), str(d.get("reducer")), int(d.get("round", -1))))
                self.dsync_ms = int(d.get("dsync_ms", 0))

    @property
    def reducer(self) -> str | None:
        """The sender of the last GLOBAL."""
        return self.globals[-1][1] if self.globals else None

    def takeover_after(self, t: float, dead: str) -> float | None:
        """Seconds from ``t`` to the first GLOBAL sent by another reducer than ``dead``."""
        return next((at - t for at, red, _ in self.globals if at >= t and red != dead), None)

    def resumed_after(self, t: float, in_flight_s: float = 0.3) -> tuple[float, str] | None:
        """Seconds from ``t`` (a reducer's death) to the next GLOBAL, and its reducer.

        The next GLOBAL comes from whoever reduces next: another worker after the liveness timeout, or the
        killed worker itself when it is restarted (same instance id) before that. GLOBALs arriving within
        ``in_flight_s`` of ``t`` were sent before the kill and do not count.
        """
        return next(((at - t, red) for at, red, _ in self.globals if at >= t + in_flight_s), None)

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()
