"""Soak run: the pipeline under load with faults injected on a schedule; counts records in / out / lost / duplicated.

``run_soak(options)`` starts (or uses) a broker, a producer writing ``rate`` raw records per second, ``workers``
``skewroute router`` processes of one deployment, and a :class:`Verifier` reading the combiner topic; with
``spark`` also the route's Spark job (dedupe on). On the schedule it SIGKILLs a router worker and starts it
again ``restart_after_s`` later (same instance id), and SIGKILLs the Dalton reducer (the worker that sent the
last GLOBAL). At the end it stops the producer, waits until the combiner topic holds every acknowledged raw
record (or ``drain_s`` passes), stops everything and reports:

* ``records_in``: raw records the broker acknowledged; ``records_out``: routed records read back;
* ``lost``: acknowledged raw records whose source position ``(tp, p, o)`` never reached the combiner topic
  (must be 0);
* ``duplicated``: routed records beyond the first per source position (at-least-once replays); after
  deduplication on the source position they are 0 by construction, and ``unique_out == records_in`` checks it.

The building blocks (:class:`Verifier`, :class:`RawProducer`, :class:`ControlWatcher`, :func:`worker_config`,
:func:`kill_group`) are what the reliability tests use as well.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from connectors.admin import TopicSpec, ensure_topics, partition_count
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin, make_consumer, make_producer
from router.demo.processes import Child, Processes, router_command, spark_command
from schemas.settings import KafkaSettings

__all__ = [
    "ControlWatcher",
    "RawProducer",
    "SoakOptions",
    "SoakResult",
    "Verifier",
    "kill_group",
    "run_soak",
    "worker_config",
]


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
) -> Path:
    """Write a router worker's YAML settings (one route over ``raw_topic``) and return the path."""
    cfg = {
        "kafka": {"bootstrap_servers": bootstrap},
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

    def __init__(self, kafka: KafkaSettings, topic: str, partitions: int) -> None:
        self.topic = topic
        self.seen: Counter[tuple[str, int, int]] = Counter()
        self.records = 0
        self.bad = 0
        self.first: dict[tuple[str, int, int], dict[str, Any]] = {}
        self._consumer = make_consumer(
            kafka, f"skewroute-verifier-{uuid.uuid4().hex[:10]}", **{"fetch.wait.max.ms": 20}
        )
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self._keep_values = False

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
            try:
                d = orjson.loads(m.value() or b"")
                pos = (str(d["tp"]), int(d["p"]), int(d["o"]))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                self.bad += 1
                continue
            self.seen[pos] += 1
            if self._keep_values and pos not in self.first:
                self.first[pos] = d
            n += 1
        self.records += n
        return n

    def wait_for(self, positions: set[tuple[str, int, int]], timeout: float) -> bool:
        """Poll until every one of ``positions`` was seen (``True``) or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        while True:
            missing = sum(1 for p in positions if p not in self.seen)
            if missing == 0:
                return True
            if time.monotonic() > deadline:
                return False
            self.poll(0.5)

    @property
    def duplicates(self) -> int:
        """Routed records beyond the first per source position."""
        return self.records - len(self.seen)

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


class RawProducer:
    """Writes JSON raw records ``{"key", "i", "x"}`` (Zipf keys) at ``rate`` per second on a thread.

    ``acked`` holds the source position ``(topic, partition, offset)`` of every record the broker acknowledged,
    ``failed`` counts the ones it did not.
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

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is None:
                self.acked.add((msg.topic(), msg.partition(), msg.offset()))
            else:
                self.failed += 1

    def send(self, n: int) -> None:
        """Produce ``n`` records now (round-robin over the partitions) without waiting for them."""
        keys = (self._rng.zipf(1.5, n) % 1000).tolist()
        for k in keys:
            i = self.sent
            value = orjson.dumps({"key": f"k{k}", "i": i, "x": i % 100})
            while True:
                try:
                    self._producer.produce(self.topic, value, partition=i % self.partitions,
                                           on_delivery=self._on_delivery)  # fmt: skip
                    break
                except BufferError:
                    self._producer.poll(0.05)
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
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

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


@dataclass
class SoakOptions:
    """What a soak run does (times in seconds)."""

    duration_s: float = 600.0
    rate: float = 500.0
    workers: int = 3
    partitioner: str = "dalton"
    combiners: int = 4
    raw_partitions: int = 4
    delivery: str = "at_least_once"
    kill_every_s: float = 60.0  # SIGKILL a random router worker this often (0: never)
    restart_after_s: float = 5.0
    kill_reducer_every_s: float = 150.0  # SIGKILL the Dalton reducer this often (0: never)
    drain_s: float = 120.0
    spark: bool = False
    bootstrap: str | None = None  # an existing broker; default: start an embedded one
    workdir: Path = Path(".skewroute/soak")
    seed: int = 0


@dataclass
class SoakResult:
    """The figures of a soak run."""

    seconds: float
    records_in: int
    records_out: int
    unique_out: int
    lost: int
    duplicated: int
    duplicated_after_dedupe: int
    producer_failures: int
    kills: int
    reducer_kills: int
    takeovers_s: list[float] = field(default_factory=list)  # reducer killed -> next GLOBAL (rounds resumed)
    takeover_by: list[str] = field(default_factory=list)  # "killed->next reducer" per reducer kill
    rounds: int = 0
    events: list[str] = field(default_factory=list)
    spark_exact: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def _schedule(o: SoakOptions) -> list[tuple[float, str]]:
    events: list[tuple[float, str]] = []
    if o.kill_every_s > 0:
        t = o.kill_every_s
        while t < o.duration_s - o.restart_after_s:
            events.append((t, "kill"))
            t += o.kill_every_s
    if o.kill_reducer_every_s > 0 and o.partitioner == "dalton":
        t = o.kill_reducer_every_s
        while t < o.duration_s - o.restart_after_s:
            events.append((t + 0.5 * o.restart_after_s, "kill-reducer"))
            t += o.kill_reducer_every_s
    return sorted(events)


def run_soak(o: SoakOptions, say: Callable[[str], None] = print) -> SoakResult:
    """Run the soak described by ``o`` and return its figures (see the module doc)."""
    o.workdir.mkdir(parents=True, exist_ok=True)
    broker = None
    if o.bootstrap is None:
        broker = EmbeddedBroker(free_port(), state_dir=o.workdir / "broker").start()
    bootstrap = o.bootstrap or (broker.bootstrap if broker else "")
    try:
        return _run(o, bootstrap, say)
    finally:
        if broker is not None:
            broker.stop()


def _run(o: SoakOptions, bootstrap: str, say: Callable[[str], None]) -> SoakResult:
    tag = uuid.uuid4().hex[:6]
    raw, app_id, control = f"soak-{tag}", f"soak-{tag}", f"soak-{tag}.control"
    kafka = KafkaSettings(bootstrap_servers=bootstrap)
    admin = make_admin(kafka)
    ensure_topics(admin, [TopicSpec(raw, o.raw_partitions), TopicSpec(control, 1),
                          TopicSpec(f"{raw}.combiners", o.combiners, exact=True)])  # fmt: skip
    rng = random.Random(o.seed)
    names = [f"w{i}" for i in range(o.workers)]
    spark_cfg = {
        "dedupe": True, "watermark": "10 minutes", "trigger_interval": "2 seconds",
        "checkpoint_dir": str(o.workdir / tag / "checkpoints"), "progress_log": str(o.workdir / tag / "progress.jsonl"),
    }  # fmt: skip
    configs = {
        n: worker_config(
            o.workdir / tag / f"{n}.yaml", bootstrap, raw, app_id=app_id, instance=n, state_dir=o.workdir / tag / n,
            partitioner={"name": o.partitioner}, combiners=o.combiners, spark=spark_cfg,
            router={"control_topic": control, "dsync_ms": 500, "delivery": o.delivery, "batch_max_records": 2000},
        )
        for n in names
    }  # fmt: skip
    ports = {n: free_port() for n in names}
    result = SoakResult(0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    verifier = Verifier(kafka, f"{raw}.combiners", o.combiners)
    watcher = ControlWatcher(kafka, control)
    producer = RawProducer(kafka, raw, o.rate, partitions=o.raw_partitions, seed=o.seed)
    t0 = time.monotonic()

    def note(msg: str) -> None:
        line = f"[{time.monotonic() - t0:7.1f}s] {msg}"
        result.events.append(line)
        say(line)

    with Processes() as procs:
        children: dict[str, Child] = {}

        def start(name: str) -> None:
            cmd = router_command(configs[name], ports[name])
            children[name] = procs.start(name, cmd, o.workdir / tag / f"{name}.log")

        for n in names:
            start(n)
        if o.spark:
            procs.start("spark", spark_command(configs[names[0]]), o.workdir / tag / "spark.log",
                        stop_signal=signal.SIGINT)  # fmt: skip
        producer.start()
        note(f"{o.workers} workers ({o.partitioner}, {o.delivery}), producer at {o.rate:.0f}/s, broker {bootstrap}")
        pending: list[tuple[float, str]] = []  # (restart at, name)
        schedule = _schedule(o)
        reducer_kills: list[tuple[float, str]] = []
        while (now := time.monotonic() - t0) < o.duration_s:
            verifier.poll(0.2)
            watcher.poll(0)
            for at, name in [p for p in pending if p[0] <= now]:
                pending.remove((at, name))
                start(name)
                note(f"restarted {name}")
            while schedule and schedule[0][0] <= now:
                _, what = schedule.pop(0)
                alive = [n for n in names if n in children and children[n].running]
                if what == "kill-reducer":
                    victim = watcher.reducer if watcher.reducer in alive else None
                    if victim is None:
                        continue
                    reducer_kills.append((time.monotonic(), victim))
                    result.reducer_kills += 1
                else:
                    victim = rng.choice(alive) if alive else None
                    if victim is None:
                        continue
                result.kills += 1
                kill_group(children[victim])
                procs.children.remove(children[victim])
                del children[victim]
                pending.append((now + o.restart_after_s, victim))
                red = f" (the reducer; DSYNC {watcher.dsync_ms} ms)" if what == "kill-reducer" else ""
                note(f"SIGKILL {victim}{red}")
            for n, c in list(children.items()):
                if not c.running:
                    note(f"{n} exited by itself (code {c.proc.returncode}); restarting:\n{c.log_tail(800)}")
                    procs.children.remove(c)
                    del children[n]
                    start(n)
        for _, name in pending:
            start(name)
        producer.stop()
        acked = producer.positions()
        note(f"producer stopped: {len(acked)} acknowledged; draining the combiner topic (≤ {o.drain_s:.0f} s)")
        verifier.wait_for(acked, o.drain_s)
        watcher.poll(1.0)
        for at, dead in reducer_kills:
            resumed = watcher.resumed_after(at)
            if resumed is not None:
                result.takeovers_s.append(round(resumed[0], 2))
                result.takeover_by.append(f"{dead}->{resumed[1]}")
        if o.spark:
            result.spark_exact = _spark_check(kafka, raw, acked, verifier, o.drain_s)
    result.seconds = time.monotonic() - t0
    result.records_in = len(acked)
    result.records_out = verifier.records
    result.unique_out = len(set(verifier.seen) & acked)
    result.lost = len(acked - set(verifier.seen))
    result.duplicated = verifier.duplicates
    deduped = Counter(dict.fromkeys(verifier.seen, 1))  # what a consumer deduplicating on (tp, p, o) keeps
    result.duplicated_after_dedupe = sum(deduped.values()) - len(deduped)
    result.producer_failures = producer.failed
    result.rounds = len(watcher.globals)
    verifier.close()
    watcher.close()
    return result


def _spark_check(
    kafka: KafkaSettings, raw: str, acked: set[tuple[str, int, int]], verifier: Verifier, timeout: float
) -> bool:
    """Whether the results topic's total count (last value per (window, key)) equals the records in."""
    from connectors.topic_reader import read_topic

    if partition_count(make_admin(kafka), f"{raw}.results") is None:
        return False
    deadline = time.monotonic() + timeout
    while True:
        last: dict[bytes, int] = {}
        for r in read_topic(kafka, f"{raw}.results", idle_s=2.0):
            if r.key is not None and r.value is not None:
                last[r.key] = int(orjson.loads(r.value)["count"])
        total = sum(last.values())
        if total == len(acked) or time.monotonic() > deadline:
            return total == len(acked)
        time.sleep(3)
