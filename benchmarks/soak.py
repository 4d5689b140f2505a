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
* ``duplicated``: routed records beyond the first per source position (at-least-once replays; a consumer
  deduplicating on the source position drops them: ``--spark`` checks what the Spark job with ``spark.dedupe``
  really ends with, ``spark_exact``);
* with ``poison_every = N`` every N-th raw record is a poison pill (bad JSON, no key, a key of the wrong type,
  not UTF-8, not an object, two days ahead, 950 KB): ``poison_in`` were acknowledged by the broker,
  ``poison_dead_lettered`` of them are in the DLQ (by source position), ``poison_unaccounted`` are neither in
  the DLQ nor routed (must be 0), ``poison_routed`` were routed (must be 0);
* with ``skew_at_s``, from then on ``skew`` of the records carry one hot key (a sudden hot spot).

The building blocks (:class:`Verifier`, :class:`RawProducer`, :class:`ControlWatcher`, :func:`worker_config`,
:func:`kill_group`) live in :mod:`benchmarks.soak_parts`; the reliability tests use them as well.
"""

from __future__ import annotations

import random
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks.demo.processes import Child, Processes, router_command, spark_command
from benchmarks.soak_parts import ControlWatcher, RawProducer, Verifier, kill_group, worker_config
from connectors.admin import TopicSpec, ensure_topics, partition_count
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings

__all__ = ["SoakOptions", "SoakResult", "run_soak"]


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
    poison_every: int = 0  # every N-th raw record is a poison pill (0: none)
    skew: float = 0.5  # share of the records on one hot key from skew_at_s on
    skew_at_s: float = 0.0  # when the hot key appears (0: never)


@dataclass
class SoakResult:
    """The figures of a soak run."""

    seconds: float
    records_in: int
    records_out: int
    unique_out: int
    lost: int
    duplicated: int
    producer_failures: int
    kills: int
    reducer_kills: int
    takeovers_s: list[float] = field(default_factory=list)  # reducer killed -> next GLOBAL (rounds resumed)
    takeover_by: list[str] = field(default_factory=list)  # "killed->next reducer" per reducer kill
    rounds: int = 0
    events: list[str] = field(default_factory=list)
    spark_exact: bool | None = None
    poison_in: int = 0
    poison_dead_lettered: int = 0
    poison_routed: int = 0
    poison_unaccounted: int = 0

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
    result = SoakResult(0.0, 0, 0, 0, 0, 0, 0, 0, 0)
    verifier = Verifier(kafka, f"{raw}.combiners", o.combiners)
    watcher = ControlWatcher(kafka, control)
    producer = RawProducer(kafka, raw, o.rate, partitions=o.raw_partitions, seed=o.seed)
    producer.poison_every = o.poison_every
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
            if o.skew_at_s and now >= o.skew_at_s and producer.hot_fraction == 0:
                producer.hot_fraction = o.skew
                note(f"skew: {o.skew:.0%} of the records on one hot key from now on")
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
        poison = set(producer.poison_acked)
        in_dlq = _dead_lettered(kafka, f"{raw}.dlq") if poison else set()
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
    result.poison_in = len(poison)
    result.poison_dead_lettered = len(poison & in_dlq)
    result.poison_routed = len(poison & set(verifier.seen))
    result.poison_unaccounted = len(poison - in_dlq - set(verifier.seen))
    result.producer_failures = producer.failed
    result.rounds = len(watcher.globals)
    verifier.close()
    watcher.close()
    return result


def _dead_lettered(kafka: KafkaSettings, dlq: str) -> set[tuple[str, int, int]]:
    """The source positions found in the DLQ."""
    from benchmarks.topic_reader import read_topic

    if partition_count(make_admin(kafka), dlq) is None:
        return set()
    out = set()
    for r in read_topic(kafka, dlq, idle_s=3.0):
        d = orjson.loads(r.value or b"{}")
        out.add((str(d["topic"]), int(d["partition"]), int(d["offset"])))
    return out


def _spark_check(
    kafka: KafkaSettings, raw: str, acked: set[tuple[str, int, int]], verifier: Verifier, timeout: float
) -> bool:
    """Whether the results topic's total count (last value per (window, key)) equals the records in."""
    from benchmarks.topic_reader import read_topic

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
