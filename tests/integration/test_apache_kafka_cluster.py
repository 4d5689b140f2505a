"""A 3-node Apache Kafka cluster (RF 3, min.insync.replicas 2): one broker SIGKILLed mid-stream, then restarted.

Two exactly_once router workers with the Dalton partitioner (sync over the control topic, also RF 3) route a
raw topic while records are still being written; node 2 is SIGKILLed in the middle and restarted 10 s later.
Leaders move, the in-sync replicas stay >= 2, so producers (acks=all), the routers' transactions and the sync go
on. A read_committed reader sees every source position exactly once (nothing lost, nothing double counted), and
a Spark run reading read_committed without dedupe gives the exact aggregates.

Starting three JVM brokers takes over a minute on the 2-core machine: this runs with ``-m extended`` only; the
default run covers a single node (test_apache_kafka_eos.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.demo.processes import Processes
from benchmarks.soak_parts import Verifier, worker_config
from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_topics
from connectors.apache_kafka import ApacheKafkaCluster
from connectors.broker import free_port
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings, SkewrouteSettings
from tests.integration.router_support import RAW_PARTITIONS, produce, wait_for, zipf_records
from tests.integration.spark_support import assert_same, raw_recs, read_results, reference, run_available_now
from tests.integration.test_reliability_router import _consumed, _start

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.extended]

N = 12_000


def test_three_nodes_one_killed_mid_stream_and_restarted(tmp_path: Path, spark) -> None:
    cluster = ApacheKafkaCluster(port=free_port(), nodes=3, state_dir=tmp_path / "kafka",
                                 broker_conf={"min.insync.replicas": 2})  # fmt: skip
    with cluster:
        kafka = KafkaSettings(bootstrap_servers=cluster.bootstrap)
        topic, control = "raw-3n", "raw-3n.control"
        ensure_topics(make_admin(kafka), [TopicSpec(topic, RAW_PARTITIONS, 3), TopicSpec(control, 1, 3)])
        records = zipf_records(N, seed=41)
        produce(kafka, topic, records[: N // 2])
        ports = {n: free_port() for n in ("wa", "wb")}
        route = {"value_field": "i", "replication_factor": 3}
        router = {"control_topic": control, "dsync_ms": 500, "batch_max_records": 500, "delivery": "exactly_once"}
        spark_cfg = {"dedupe": False, "isolation_level": "read_committed", "watermark": "1 hour",
                     "window": "10 seconds", "checkpoint_dir": str(tmp_path / "ck"),
                     "progress_log": str(tmp_path / "progress.jsonl")}  # fmt: skip
        cfgs = {
            n: worker_config(
                tmp_path / f"{n}.yaml", kafka.bootstrap_servers, topic, app_id="app-3n", instance=n,
                state_dir=tmp_path / n, partitioner={"name": "dalton"}, route=route, router=router, spark=spark_cfg,
            )
            for n in ports
        }  # fmt: skip
        verifier = Verifier(kafka, f"{topic}.combiners", 4, "read_committed").keep_values()
        positions = {(topic, i % RAW_PARTITIONS, i // RAW_PARTITIONS) for i in range(N)}
        with Processes() as procs:
            workers = [_start(procs, cfgs[n], ports[n], tmp_path / f"{n}.log") for n in ports]
            wait_for(lambda: sum(max(0, _consumed(ports[n], topic)) for n in ports) >= 2_000, 120, "routing")
            cluster.kill_node(2)
            killed = time.monotonic()
            produce(kafka, topic, records[N // 2 :])  # written with a node down: acks=all needs 2 in-sync replicas
            verifier.poll(1.0)
            during = len(verifier.seen)
            time.sleep(max(0.0, 10 - (time.monotonic() - killed)))
            cluster.start_node(2, timeout=120)
            assert verifier.wait_for(positions, 180), f"{sum(p not in verifier.seen for p in positions)} never routed"
            verifier.poll(2.0)
            assert all(w.running for w in workers), [w.log_tail() for w in workers if not w.running]
        verifier.close()
        assert set(verifier.seen) == positions and verifier.duplicates == 0  # nothing lost, nothing twice
        assert during > 0

        settings = SkewrouteSettings.load(cfgs["wa"])
        run_available_now(spark, settings)
        recs = raw_recs(read_topic(kafka, topic, expected=N))
        assert_same(read_results(kafka, f"{topic}.results"), reference(recs, 10_000, 10_000))
        print(f"\n3 nodes: start {cluster.timings}; routed while node 2 was down: {during}")
