"""Retention on Apache Kafka deletes raw records while the router is stopped: a clear data-loss error, or the skip.

A worker routes the first batch and stops (offsets committed). A second batch is written, then the topic's
retention is cut to one second: the broker deletes every closed segment, including the second batch the router
never read. The next worker fails with :class:`DataLossError` naming the partitions and offsets
(``router.on_data_loss: fail``, the default); with ``skip`` it goes on from the log start and routes exactly
what is left. Tansu has no retention: this runs on Apache Kafka only.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from connectors.apache_kafka import ApacheKafkaCluster
from connectors.kafka import make_admin, make_consumer, make_producer
from connectors.retention import DataLossError
from router.dataplane import RouteDataPlane
from router.observability import RouterMetrics
from tests.integration.router_support import RAW_PARTITIONS, routed, run_plane, settings, wait_for, zipf_records

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka]

N = 2_000


def _produce(kafka, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    p = make_producer(kafka)
    for i, (k, v) in enumerate(records):
        p.produce(topic, v, k, partition=i % RAW_PARTITIONS)
    assert p.flush(30) == 0


def _low_watermarks(kafka, topic: str) -> list[int]:
    c = make_consumer(kafka, f"lw-{topic}")
    lows = [
        c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[0] for p in range(RAW_PARTITIONS)
    ]
    c.close()
    return lows


def _stable_lows(kafka: Any, topic: str) -> list[int]:
    """The low watermarks once two readings 2 s apart agree (a deletion already under way has finished)."""
    lows = _low_watermarks(kafka, topic)
    for _ in range(15):
        time.sleep(2.0)
        again = _low_watermarks(kafka, topic)
        if again == lows:
            return lows
        lows = again
    raise AssertionError(f"the log start of {topic} kept moving: {lows}")


def test_retention_under_a_stopped_router_is_a_clear_data_loss_error_or_the_configured_skip(
    apache_kafka: ApacheKafkaCluster, topic: str
) -> None:
    from schemas.settings import KafkaSettings

    kafka = KafkaSettings(bootstrap_servers=apache_kafka.bootstrap)
    admin = make_admin(kafka)
    keep = {"retention.ms": "-1", "segment.ms": "100"}  # a new segment per append >= 100 ms after the last
    for f in admin.create_topics([NewTopic(topic, RAW_PARTITIONS, 1, config=keep)]).values():
        f.result(30)
    s = settings(kafka, topic, f"app-{topic}", router={"delivery": "at_least_once"})
    _produce(kafka, topic, zipf_records(N, seed=31))
    run_plane(s, N)  # routes the first batch, commits, stops
    committed_end = N // RAW_PARTITIONS

    _produce(kafka, topic, zipf_records(N, seed=32, start=N))  # never read by a router
    time.sleep(0.5)
    tail = zipf_records(RAW_PARTITIONS, seed=33, start=2 * N)  # one record per partition: closes the segments
    _produce(kafka, topic, tail)
    short = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    for f in admin.incremental_alter_configs([short]).values():
        f.result(30)
    wait_for(lambda: min(_low_watermarks(kafka, topic)) > committed_end, 60, "retention to delete the unread batch")
    # keep the rest: with 1 s retention the cleaner would go on deleting segments while the workers below run,
    # and the records left would shrink under the test's feet
    for f in admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET)])]).values():  # fmt: skip
        f.result(30)
    lows = _stable_lows(kafka, topic)

    # on_data_loss: fail (the default) -> the worker stops with an error naming the lost offsets
    route = s.routes[0]
    plane = RouteDataPlane(s.kafka, s.router, route, RouterMetrics("w2"), instance_id="w2").start()
    wait_for(lambda: plane.error is not None or not plane.alive, 60, "the worker to detect the data loss")
    plane.stop()
    plane.join(30)
    assert isinstance(plane.error, DataLossError), plane.error
    assert {(r.partition, r.committed, r.log_start) for r in plane.error.lost} == {
        (p, committed_end, lows[p]) for p in range(RAW_PARTITIONS)
    }
    assert f"committed {committed_end}, log now starts at {lows[0]}" in str(plane.error)
    assert len(routed(kafka, route.combiner_topic_name, expected=N)) == N  # nothing routed after the loss

    # on_data_loss: skip -> goes on from the log start and routes exactly what is left
    end = committed_end + N // RAW_PARTITIONS + 1  # Apache Kafka's end offsets are exact: no probing
    left = sum(end - low for low in lows)
    skip = s.model_copy(update={"router": s.router.model_copy(update={"on_data_loss": "skip"})})
    run_plane(skip, left, instance="w3")
    out = routed(kafka, route.combiner_topic_name, expected=N + left)
    assert len(out) == N + left
    positions = [(d["p"], d["o"]) for _, d in out]
    assert len(set(positions)) == len(positions)  # nothing routed twice
    assert {(p, o) for p, o in positions if o >= committed_end} == {
        (p, o) for p in range(RAW_PARTITIONS) for o in range(lows[p], end)
    }
