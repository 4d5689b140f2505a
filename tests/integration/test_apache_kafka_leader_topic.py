"""On a 3-node Apache Kafka cluster, Faust's group-leader topic is replicated like skewroute's own topics.

Faust creates ``<app_id>-__assignor-__leader`` with replication factor 1 unless it exists; ``skewroute router``
creates it first. Three JVM brokers take over a minute on the 2-core machine: ``-m extended`` only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.admin import TopicSpec, ensure_topics
from connectors.apache_kafka import ApacheKafkaCluster
from connectors.broker import free_port
from connectors.kafka import make_admin
from router.preflight import faust_leader_topic
from schemas.settings import KafkaSettings
from tests.integration.router_support import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.extended]


def _await_topic(kafka: KafkaSettings, topic: str) -> dict[str, Any]:
    """The cluster's topics once ``topic`` is among them (the admin client ends here, not with the test)."""
    admin = make_admin(kafka)
    wait_for(lambda: topic in admin.list_topics(timeout=10).topics, 120, topic)
    return dict(admin.list_topics(timeout=10).topics)


def test_router_creates_faust_leader_topic_with_the_clusters_replication(tmp_path: Path) -> None:
    with ApacheKafkaCluster(port=free_port(), nodes=3, state_dir=tmp_path / "kafka") as cluster:
        kafka = KafkaSettings(bootstrap_servers=cluster.bootstrap)
        ensure_topics(make_admin(kafka), [TopicSpec("raw", 2)])
        config = tmp_path / "skewroute.yaml"
        config.write_text(yaml.safe_dump({
            "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
            "routes": [{"raw_topic": "raw", "combiners": 2, "partitioner": {"name": "hash"}}],
            "router": {"app_id": "app-leader", "state_dir": str(tmp_path / "state")},
        }))  # fmt: skip
        log = (tmp_path / "router.log").open("wb")
        proc = subprocess.Popen([str(Path(sys.executable).with_name("skewroute")), "router", "--config", str(config)],
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        leader = faust_leader_topic("app-leader")
        try:
            topics = _await_topic(kafka, leader)
        finally:
            proc.terminate()
            proc.wait(60)
            log.close()
        assert [len(p.replicas) for p in topics[leader].partitions.values()] == [3]  # the cluster's default, not 1
