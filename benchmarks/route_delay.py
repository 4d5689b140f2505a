"""How long a live record waits in the router: routed Kafka timestamp minus raw Kafka timestamp, per setting.

Starts an embedded broker (or uses ``--bootstrap``), then for each setting in turn (``--align`` values,
alternated over ``--rounds`` so that a drifting machine does not favour one): fresh raw and combiner topics,
``--routers`` router worker processes on them, a producer writing ``--rate`` records per second for
``--seconds`` with the wall clock as event time, and a read-back of both topics. A routed record (format 2)
names its source position, so each is matched with its raw record: the delay is the time between the two
producers' timestamps (the raw producer's and the router's), i.e. the router's batch wait, its work, the
alignment holds and the handing to librdkafka. No Spark runs: what Spark adds is the same for every setting.
Records produced in the first ``--warmup`` seconds are routed but not counted (the workers' first batches: the
group's first fetches, a Dalton sync's first round, the alignment channel's warm-up).

``--quiet-partition``: the last raw partition gets one record every two seconds and the others share the rest,
the case where ``router.align_ms`` can hold live records (a partition caught up less than ``align_ms`` ago
still counts, router/DATAPLANE.md).

    python -m benchmarks.route_delay --align 0,1000 --rounds 2 --out reports/route-delay
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml

from benchmarks.demo.processes import Processes, router_command
from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin, make_producer, produce_waiting
from schemas.exceptions import SkewrouteError
from schemas.records import decode_routed_record
from schemas.settings import KafkaSettings

__all__ = ["Delay", "main", "measure"]

RAW_PARTITIONS = 8
COMBINERS = 8


@dataclass(frozen=True)
class Delay:
    """One run's router delay percentiles (ms) and counts."""

    align_ms: int
    round: int
    produced: int
    routed: int
    counted: int
    p50: float
    p90: float
    p99: float
    max: float


def _config(bootstrap: str, tag: str, folder: Path, align_ms: int, routers: int, partitioner: str) -> Path:
    part: dict[str, Any] = {"name": partitioner}
    if partitioner == "dalton" and routers > 1:
        part |= {"routers": routers, "raw_keys": "partitioned"}
    doc = {
        "kafka": {"bootstrap_servers": bootstrap},
        "routes": [
            {
                "raw_topic": f"{tag}.raw",
                "name": tag,
                "combiner_topic": f"{tag}.combiners",
                "combiners": COMBINERS,
                "key": {"source": "field", "field": "k"},
                "time": {"source": "field", "field": "t", "unit": "ms"},
                "value_field": "x",
                "window": {"kind": "time", "size": 60_000, "slide": 1_000},
                "partitioner": part,
            }
        ],
        "router": {
            "app_id": tag,
            "control_topic": f"{tag}.control",
            "state_dir": str(folder / "router-state"),
            "log_format": "text",
            "log_level": "WARNING",
            "align_ms": align_ms,
        },
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _wait_owned(ports: list[int], timeout_s: float = 120.0) -> None:
    """Until the workers own every raw partition between them (each at least one)."""
    from router.commands.worker import scrape

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        owned = []
        for port in ports:
            try:
                views = scrape(f"http://127.0.0.1:{port}/metrics", timeout=1.0).values()
                owned.append(sum(v.values.get("skewroute_assigned_partitions", 0.0) for v in views))
            except OSError:
                owned.append(0.0)
        if sum(owned) >= RAW_PARTITIONS and all(owned):
            return
        time.sleep(0.25)
    raise SkewrouteError(f"router workers did not own the {RAW_PARTITIONS} raw partitions in {timeout_s:g} s")


def _produce(kafka: KafkaSettings, topic: str, rate: float, seconds: float, quiet: bool) -> int:
    """``rate`` records/s for ``seconds``, event time = now; keyed (Zipf 1.5 over 10,000 keys)."""
    producer = make_producer(kafka, **{"linger.ms": 5, "partitioner": "murmur2_random"})
    total = int(rate * seconds)
    keys = np.random.default_rng(1).zipf(1.5, total) % 10_000
    every = max(1, int(2 * rate))  # --quiet-partition: one record every two seconds on the last partition
    t0, n = time.time(), 0
    while n < total:
        due = min(total, int((time.time() - t0) * rate))
        while n < due:
            key = f"k{keys[n]}"
            value = orjson.dumps({"k": key, "t": int(time.time() * 1000), "x": 1.0})
            if quiet:
                part = RAW_PARTITIONS - 1 if n % every == 0 else int(keys[n]) % (RAW_PARTITIONS - 1)
                produce_waiting(producer, topic, value, key.encode(), partition=part)
            else:
                produce_waiting(producer, topic, value, key.encode())
            n += 1
        producer.poll(0)
        time.sleep(0.002)
    if producer.flush(60):
        raise SkewrouteError(f"{topic}: records left undelivered")
    return total


def measure(
    kafka: KafkaSettings,
    folder: Path,
    align_ms: int,
    round_no: int,
    *,
    rate: float,
    seconds: float,
    routers: int,
    partitioner: str,
    quiet: bool,
    warmup_s: float = 0.0,
) -> Delay:
    """One run: fresh topics, ``routers`` workers with ``align_ms``, the live input, the delays read back."""
    tag = f"delay-{align_ms}-{round_no}-{time.monotonic_ns() % 10**9}"
    run = folder / tag
    run.mkdir(parents=True)
    ensure_topics(
        make_admin(kafka), [TopicSpec(f"{tag}.raw", RAW_PARTITIONS), TopicSpec(f"{tag}.combiners", COMBINERS)]
    )
    config = _config(kafka.bootstrap_servers, tag, run, align_ms, routers, partitioner)
    with Processes() as procs:
        ports = [free_port() for _ in range(routers)]
        for i, port in enumerate(ports):
            env = {"SKEWROUTE_ROUTER__INSTANCE_ID": f"{tag}-{i + 1}"}
            procs.start(f"router-{i + 1}", router_command(config, port), run / f"router-{i + 1}.log", env)
        _wait_owned(ports)
        produced = _produce(kafka, f"{tag}.raw", rate, seconds + warmup_s, quiet)
        raw = {(r.partition, r.offset): r.timestamp for r in read_topic(kafka, f"{tag}.raw", expected=produced)}
        routed = read_topic(kafka, f"{tag}.combiners", expected=produced, timeout_s=60.0)
    start = min(raw.values()) + warmup_s * 1000
    delays = []
    for r in routed:
        doc = decode_routed_record(r.value, r.key, f"{tag}.combiners", r.partition)
        sent = None if doc is None else raw.get((doc["p"], doc["o"]))
        if sent is not None and sent >= start:
            delays.append(r.timestamp - sent)
    d = np.asarray(delays, dtype=np.float64)
    if not d.size:
        raise SkewrouteError(f"{tag}: nothing was routed")
    p50, p90, p99 = (float(x) for x in np.percentile(d, [50, 90, 99]))
    return Delay(align_ms, round_no, produced, len(routed), int(d.size), p50, p90, p99, float(d.max()))


def render(rows: list[Delay], opts: argparse.Namespace) -> str:
    """The Markdown report."""
    out = [
        "# Router delay, live (routed Kafka timestamp - raw Kafka timestamp)",
        "",
        f"{opts.routers} router workers ({opts.partitioner}), {RAW_PARTITIONS} raw partitions, {COMBINERS} combiners, "
        f"{opts.rate:g} records/s for {opts.warmup:g} + {opts.seconds:g} s per run (the first {opts.warmup:g} s "
        "not counted)"
        + (", the last raw partition one record every 2 s" if opts.quiet_partition else "")
        + f". Settings alternated over {opts.rounds} rounds.",
        "",
        "| round | `router.align_ms` | produced | routed | counted | p50 ms | p90 ms | p99 ms | max ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    out += [
        f"| {r.round} | {r.align_ms} | {r.produced:,} | {r.routed:,} | {r.counted:,} | {r.p50:.0f} | {r.p90:.0f} | "
        f"{r.p99:.0f} | {r.max:.0f} |"
        for r in rows
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run every setting, alternating, print the table and write ``route-delay.md`` and ``.json`` to ``--out``."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.route_delay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--align", default="0,1000", help="router.align_ms values, comma-separated")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each setting (order reversed every other round)")
    ap.add_argument("--rate", type=float, default=15_000.0, help="records per second")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each run's input that is counted")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of input first, routed but not counted")
    ap.add_argument("--routers", type=int, default=2, help="router worker processes")
    ap.add_argument("--partitioner", default="dalton")
    ap.add_argument("--quiet-partition", action="store_true", help="the last raw partition: a record every 2 s")
    ap.add_argument("--bootstrap", default=None, help="an existing broker (default: start one)")
    ap.add_argument("--out", type=Path, default=Path("reports/route-delay"))
    opts = ap.parse_args(argv)
    settings = [int(a) for a in opts.align.split(",")]
    opts.out.mkdir(parents=True, exist_ok=True)
    broker = None
    if opts.bootstrap is None:
        broker = EmbeddedBroker(port=free_port(), state_dir=opts.out / "broker").start()
    kafka = KafkaSettings(bootstrap_servers=opts.bootstrap or broker.bootstrap)  # type: ignore[union-attr]
    rows: list[Delay] = []
    try:
        for rnd in range(1, opts.rounds + 1):
            for align_ms in settings if rnd % 2 else settings[::-1]:
                row = measure(
                    kafka, opts.out, align_ms, rnd, rate=opts.rate, seconds=opts.seconds, routers=opts.routers,
                    partitioner=opts.partitioner, quiet=opts.quiet_partition, warmup_s=opts.warmup,
                )  # fmt: skip
                rows.append(row)
                print(json.dumps(asdict(row)), flush=True)
    finally:
        if broker is not None:
            broker.stop()
    text = render(rows, opts)
    (opts.out / "route-delay.md").write_text(text, encoding="utf-8")
    (opts.out / "route-delay.json").write_text(json.dumps([asdict(r) for r in rows], indent=1), encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
