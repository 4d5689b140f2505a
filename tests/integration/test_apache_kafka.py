"""Apache Kafka (KRaft, from its Maven jars): the launcher, and proof that Tansu's workarounds are not needed there.

On Apache Kafka the advertised end offset of a partition is exact (Tansu's is one producer batch short), and the
open transaction of a fenced producer is aborted, so ``read_committed`` readers never see its records (Tansu
keeps them visible). The broker detection tells the two apart.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition

from connectors.admin import TopicSpec, ensure_topics
from connectors.apache_kafka import ApacheKafkaCluster
from connectors.broker_traits import detect_broker, resolve_isolation_level
from connectors.kafka import make_admin, make_consumer
from connectors.kafka_offsets import make_probe_consumer, probe_ends
from schemas.settings import KafkaSettings

pytestmark = pytest.mark.kafka


def _one_batch_per_partition(kafka: KafkaSettings, topic: str, partitions: int, n: int) -> None:
    """``n`` records per partition, each partition's records in one producer batch."""
    ensure_topics(make_admin(kafka), [TopicSpec(topic, partitions)])
    p = Producer({**kafka.librdkafka("producer"), "linger.ms": 1000, "batch.num.messages": 100_000})
    for part in range(partitions):
        for i in range(n):
            p.produce(topic, value=str(i).encode(), partition=part)
    assert p.flush(30) == 0


def _read_all(kafka: KafkaSettings, topic: str, level: str, partitions: int = 1) -> list[bytes]:
    """Every record visible at ``level``, read to each partition's end (EOF events)."""
    c = make_consumer(kafka, f"g-{topic}-{level}", **{"isolation.level": level, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    eof: set[int] = set()
    for _ in range(200):
        for m in c.consume(1000, 0.5):
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            out.append(m.value() or b"")
        if len(eof) == partitions:
            break
    c.close()
    assert len(eof) == partitions, "never reached the end of the topic"
    return out


@pytest.mark.apache_kafka
def test_launcher_status_and_pid_file(apache_kafka: ApacheKafkaCluster) -> None:
    st = apache_kafka.status()
    assert st.running and st.pid == apache_kafka.members[0].proc.pid  # type: ignore[union-attr]
    info = json.loads(apache_kafka.pid_file.read_text())
    assert [n["port"] for n in info["nodes"]] == [apache_kafka.port]
    assert (apache_kafka.members[0].directory / "data" / "meta.properties").exists()  # formatted KRaft storage
    other = ApacheKafkaCluster(port=apache_kafka.port + 1, state_dir=apache_kafka.state_dir)
    assert not other.status().running and other.stop() is False  # nothing of ours there: nothing killed


@pytest.mark.both_brokers
def test_broker_is_detected(kafka: KafkaSettings, broker_kind: str) -> None:
    traits = detect_broker(kafka)
    assert traits.kind == ("apache" if broker_kind == "kafka" else "tansu")
    assert traits.brokers == 1
    want = "read_committed" if broker_kind == "kafka" else "read_uncommitted"
    assert resolve_isolation_level("auto", kafka) == want
    assert resolve_isolation_level("read_committed", kafka) == "read_committed"


@pytest.mark.both_brokers
def test_advertised_end_offset(kafka: KafkaSettings, topic: str, broker_kind: str) -> None:
    """Apache Kafka: the high watermark is the true end; Tansu: one batch short, the probe finds the end."""
    n = 50
    _one_batch_per_partition(kafka, topic, 2, n)
    c = make_probe_consumer(kafka.librdkafka("consumer"))
    highs = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(2)]
    ends = probe_ends(c, {topic: {"0": 0, "1": 0}})
    c.close()
    assert ends == {topic: {"0": n, "1": n}}
    if broker_kind == "kafka":
        assert highs == [n, n]  # exact: no probing needed
    else:
        assert all(h < n for h in highs), highs  # the quirk the probe exists for


@pytest.mark.apache_kafka
def test_aborted_and_fenced_transactions_invisible_to_read_committed(
    apache_kafka: ApacheKafkaCluster, topic: str
) -> None:
    kafka = KafkaSettings(bootstrap_servers=apache_kafka.bootstrap)
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 1)])
    conf = {**kafka.librdkafka("producer"), "transactional.id": f"tx-{topic}"}
    p1 = Producer(conf)
    p1.init_transactions(30)
    p1.begin_transaction()
    for i in range(10):
        p1.produce(topic, value=f"committed-{i}".encode())
    p1.commit_transaction(30)
    p1.begin_transaction()
    for i in range(5):
        p1.produce(topic, value=f"aborted-{i}".encode())
    p1.flush(30)
    p1.abort_transaction(30)
    p1.begin_transaction()
    for i in range(7):
        p1.produce(topic, value=f"fenced-{i}".encode())
    p1.flush(30)  # written to the log, transaction left open: then the producer "dies"
    p2 = Producer(conf)  # its successor (same transactional.id) fences it and aborts the open transaction
    p2.init_transactions(60)
    p2.begin_transaction()
    p2.produce(topic, value=b"successor-0")
    p2.commit_transaction(30)
    with pytest.raises(KafkaException):  # the zombie cannot commit any more
        p1.commit_transaction(10)

    committed = _read_all(kafka, topic, "read_committed")
    uncommitted = _read_all(kafka, topic, "read_uncommitted")
    want = [f"committed-{i}".encode() for i in range(10)] + [b"successor-0"]
    assert committed == want
    assert len(uncommitted) == 10 + 5 + 7 + 1  # the aborted records are in the log, just not visible
