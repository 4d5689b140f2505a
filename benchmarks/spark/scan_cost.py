"""What a routed record (wire format 2) costs Spark's scan tasks against the raw JSON record it came from.

The same records are written twice, laid out identically: a keyed raw topic (``{"k", "t", "x"}`` JSON values)
and a routed topic (format 2, the raw value embedded), record ``i`` in partition ``combiner[i]`` of both, in the
same order. One ``local[2]`` session then reads each topic with skewroute's Python source (``decode=routed``),
as batch queries into Spark's ``noop`` sink, in interleaved rounds (the order reversed every other round):

- ``source``: read and decode only;
- ``agg``: decode and the job's windowed aggregation (``spark.profile``), which is the scan tasks' real work.

Only the format differs between the two reads, so the ratio of their times is what the routed format costs
(above 1) or saves (below 1) a scan task. Prints one line per mode and writes ``scan-cost.json`` to ``--out``.

    python -m benchmarks.spark.scan_cost --records 200000 --rounds 6 --out reports/scan-cost
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benchmarks.spark.feed import assign_combiners
from benchmarks.workloads import make_workload
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin, make_producer, produce_waiting
from schemas.exceptions import SkewrouteError
from schemas.records import encode_routed_v2
from schemas.settings import KafkaSettings, SparkSettings

__all__ = ["main", "write_topics"]

TOPICS = ("raw", "routed")
MODES = ("source", "agg")


def write_topics(kafka: KafkaSettings, records: int, n: int, seed: int = 1, prefix: str = "") -> None:
    """The raw and routed topics (``n`` partitions each, hash layout) of the same Zipf 1.5 records."""
    raw_topic, routed_topic = (prefix + t for t in TOPICS)
    ensure_topics(make_admin(kafka), [TopicSpec(raw_topic, n), TopicSpec(routed_topic, n)])
    wl = make_workload(f"zipf:s=1.5,keys=10000,tuples={records},batch=100000,seed={seed}")
    keys = [f"k{int(i)}" for i in np.concatenate([k for k, _ in wl.batches()])]
    combiners = assign_combiners(keys, "hash", n, seed=seed)
    measures = np.random.default_rng(seed).integers(0, 1000, len(keys)).astype(float)
    t0 = 1_700_000_000_000
    producer = make_producer(kafka, **{"linger.ms": 50, "acks": 1, "enable.idempotence": False})
    for i, key in enumerate(keys):
        t, x, c = t0 + 5 * i, float(measures[i]), int(combiners[i])
        raw = orjson.dumps({"k": key, "t": t, "x": x})
        produce_waiting(producer, raw_topic, raw, key.encode(), partition=c)
        produce_waiting(producer, routed_topic, encode_routed_v2(t, 0, i, x, raw), key.encode(), partition=c)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SkewrouteError("records left undelivered")


def _timer(spark: Any, bootstrap: str, cfg: SparkSettings) -> Any:
    from connectors.spark_source import SHORT_NAME
    from spark_consumers.aggregations import final_aggregates, parse_routed
    from spark_consumers.job import agg_spec

    def run(topic: str, mode: str) -> float:
        df = (
            spark.read.format(SHORT_NAME)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("decode", "routed")
            .load()
        )
        if mode == "agg":
            df = final_aggregates(parse_routed(df, None), agg_spec(cfg))
        t = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t

    return run


def main(argv: list[str] | None = None) -> int:
    """Write the topics, time every read in interleaved rounds, print and write the ratios."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.spark.scan_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--combiners", "-n", type=int, default=2, help="partitions of both topics (scan tasks)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--profile", default="heavy", choices=("light", "heavy"))
    ap.add_argument("--out", type=Path, default=Path("reports/scan-cost"))
    opts = ap.parse_args(argv)
    from connectors.spark_source import register_source
    from spark_consumers.session import build_session

    opts.out.mkdir(parents=True, exist_ok=True)
    broker = EmbeddedBroker(port=free_port(), state_dir=opts.out / "broker").start()
    result: dict[str, Any] = {"records": opts.records, "combiners": opts.combiners, "profile": opts.profile}
    try:
        kafka = KafkaSettings(bootstrap_servers=broker.bootstrap)
        write_topics(kafka, opts.records, opts.combiners)
        cfg = SparkSettings(profile=opts.profile, master="local[2]", window="10 seconds")
        spark = build_session(cfg, "skewroute-scan-cost")
        spark.sparkContext.setLogLevel("ERROR")
        register_source(spark)
        run = _timer(spark, broker.bootstrap, cfg)
        for mode in MODES:
            for topic in TOPICS:  # warm-up, not counted
                run(topic, mode)
            times: dict[str, list[float]] = {t: [] for t in TOPICS}
            for r in range(opts.rounds):
                for topic in TOPICS if r % 2 == 0 else TOPICS[::-1]:
                    times[topic].append(run(topic, mode))
            ratio = statistics.median(times["routed"]) / statistics.median(times["raw"])
            result[mode] = {"seconds": times, "routed_over_raw": ratio}
            print(f"{mode}: routed / raw time, median of {opts.rounds} rounds: {ratio:.3f}  {json.dumps(times)}")
        spark.stop()
    finally:
        broker.stop()
    (opts.out / "scan-cost.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
