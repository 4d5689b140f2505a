"""Benchmark: the Spark job on ``local[2]`` vs a standalone cluster (2 workers x 1 core), same topic, one run.

    python -m benchmarks.spark.cluster_bench --tuples 200000 --report reports/spark-cluster-bench.md

Starts the embedded broker, produces one Dalton-routed Zipf topic, then runs ``skewroute spark-job --once`` as
its own process twice on it -- first with ``spark.master: local[2]``, then against a standalone cluster this
command starts (master + 2 worker JVMs, executors with the packed environment) -- each with a fresh checkpoint
and results topic. Figures per master: records, micro-batches, records/s over the micro-batches' durations
(Spark's own batch times, startup excluded) and over the driver's wall time (JVM, session and executors
included). Side by side in one run; on a loaded shared machine the figures are noisy: read ratios, not levels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

__all__ = ["main"]


def _produce(bootstrap: str, topic: str, tuples: int, n: int, s: float, seed: int) -> None:
    from benchmarks.spark.bench import _stream
    from benchmarks.spark.feed import produce_routed
    from connectors.admin import TopicSpec, ensure_topics
    from connectors.kafka import make_admin
    from router.partitioners import create
    from schemas.settings import KafkaSettings

    kafka = KafkaSettings(bootstrap_servers=bootstrap)
    ensure_topics(make_admin(kafka), [TopicSpec(f"{topic}.combiners", n, exact=True)])
    keys, times, xs = _stream(tuples, 10_000, s, seed)
    comb = create("dalton", n, window=1000, slide=100, seed=seed).assign(np.array(keys, dtype=object))
    produce_routed(kafka, f"{topic}.combiners", keys, times, xs, list(comb))


def _run(bootstrap: str, topic: str, master: str, work: Path, n: int, per_trigger: int) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    doc = {
        "kafka": {"bootstrap_servers": bootstrap},
        "routes": [{"raw_topic": topic, "combiners": n}],
        "spark": {
            "master": master, "shuffle_partitions": 2, "max_records_per_trigger": per_trigger, "dedupe": False,
            "watermark": "1 hour", "checkpoint_dir": str(work / "ck"), "progress_log": str(work / "progress.jsonl"),
            "results_topic": f"{topic}.results.{work.name}",
            "conf": {"spark.ui.enabled": "false", "spark.executor.memory": "640m", "spark.cores.max": "2"},
        },
    }  # fmt: skip
    cfg = work / "skewroute.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKEWROUTE_") or k == "SKEWROUTE_PACK_CACHE"}
    skewroute = str(Path(sys.executable).parent / "skewroute")
    t0 = time.monotonic()
    with (work / "driver.log").open("wb") as log:
        rc = subprocess.run([skewroute, "spark-job", "--config", str(cfg), "--once"], stdout=log, stderr=log, env=env)
    wall = time.monotonic() - t0
    if rc.returncode != 0:
        raise SystemExit(f"{master}: spark-job failed ({rc.returncode}); see {work / 'driver.log'}")
    batches = [json.loads(x) for x in (work / "progress.jsonl").read_text().splitlines() if x.strip()]
    data = [b for b in batches if b["input_rows"]]
    rows = sum(b["input_rows"] for b in data)
    batch_s = sum(b["batch_ms"] for b in data) / 1000
    return {
        "master": master, "records": rows, "batches": len(data), "batch_seconds": batch_s, "wall_seconds": wall,
        "records_per_s_batches": rows / batch_s if batch_s else None, "records_per_s_wall": rows / wall,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Run both masters on one topic; print the table and write the report."""
    p = argparse.ArgumentParser(prog="benchmarks.spark.cluster_bench", description=__doc__.splitlines()[0])
    p.add_argument("--tuples", type=int, default=200_000)
    p.add_argument("--per-trigger", type=int, default=50_000, help="max_records_per_trigger")
    p.add_argument("-n", "--combiners", type=int, default=8)
    p.add_argument("-s", "--zipf", type=float, default=1.5)
    p.add_argument("--report", type=Path, default=Path("reports/spark-cluster-bench.md"))
    a = p.parse_args(argv)
    from connectors.broker import EmbeddedBroker, free_port
    from spark_consumers.cluster import StandaloneCluster

    started = datetime.now(UTC)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="skewroute-cbench-") as tmp:
        root = Path(tmp)
        broker = EmbeddedBroker(free_port(), state_dir=root / "broker").start()
        cluster = StandaloneCluster(root / "cluster")
        try:
            topic = "cbench"
            _produce(broker.bootstrap, topic, a.tuples, a.combiners, a.zipf, 1)
            results = [_run(broker.bootstrap, topic, "local[2]", root / "local", a.combiners, a.per_trigger)]
            st = cluster.start(workers=2, cores=1, memory="1g", timeout=300)
            results.append(_run(broker.bootstrap, topic, st.master_url, root / "standalone", a.combiners,
                                a.per_trigger))  # fmt: skip
        finally:
            cluster.stop()
            broker.stop()
    lines = [
        "# Spark job: local[2] vs standalone (2 workers x 1 core)", "",
        f"Run {started:%Y-%m-%d %H:%M} UTC, load average at start {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} "
        f"on {os.cpu_count()} cores (a shared machine: noisy). Topic: {a.tuples:,} Dalton-routed Zipf {a.zipf} "
        f"records on {a.combiners} combiners; max_records_per_trigger {a.per_trigger:,}; Kafka results sink.", "",
        "| master | records | micro-batches | batch time s | records/s (batches) | wall s | records/s (wall) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for r in results:
        lines.append(
            f"| {r['master'].split(':')[0]}{'' if r['master'].startswith('local') else ' (2 x 1 core)'} "
            f"| {r['records']:,} | {r['batches']} | {r['batch_seconds']:.1f} | {r['records_per_s_batches']:,.0f} "
            f"| {r['wall_seconds']:.1f} | {r['records_per_s_wall']:,.0f} |"
        )
    ratio = results[1]["records_per_s_batches"] / results[0]["records_per_s_batches"]
    lines += ["", f"standalone / local records/s over batch time: {ratio:.2f}", ""]
    a.report.parent.mkdir(parents=True, exist_ok=True)
    a.report.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"report: {a.report}")


if __name__ == "__main__":
    main()
