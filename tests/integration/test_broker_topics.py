import pytest
from confluent_kafka.admin import AdminClient

from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_route_topics, ensure_topics, partition_count
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin, make_producer
from schemas.exceptions import BrokerError, TopicMismatchError
from schemas.settings import KafkaSettings, SkewrouteSettings

pytestmark = pytest.mark.kafka


def test_route_topics_created_idempotently(kafka: KafkaSettings, topic: str) -> None:
    s = SkewrouteSettings.load(kafka=kafka.model_dump(), routes=[{"raw_topic": topic, "combiners": 6}])
    route = s.routes[0]
    ensure_route_topics(s.kafka, route, f"{topic}.control")
    ensure_route_topics(s.kafka, route, f"{topic}.control")  # second call: nothing to do, no error
    admin = make_admin(kafka)
    assert partition_count(admin, route.combiner_topic_name) == 6
    assert partition_count(admin, route.dlq_topic_name) == 1
    assert partition_count(admin, f"{topic}.control") == 1


def test_mismatched_combiner_topic_refused(kafka: KafkaSettings, topic: str) -> None:
    admin = make_admin(kafka)
    ensure_topics(admin, [TopicSpec(topic, 3)])
    with pytest.raises(TopicMismatchError, match=r"has 3 partitions but the route needs exactly 4"):
        ensure_topics(admin, [TopicSpec(topic, 4, exact=True)])


@pytest.mark.both_brokers
def test_produce_and_read_back_every_record(kafka: KafkaSettings, topic: str) -> None:
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 4)])
    p = make_producer(kafka)
    sent = {(f"k{i % 17}".encode(), f"v{i}".encode()) for i in range(5000)}
    for i, (k, v) in enumerate(sorted(sent)):
        p.produce(topic, key=k, value=v, partition=i % 4)
    assert p.flush(30) == 0
    got = read_topic(kafka, topic, expected=len(sent))
    assert {(r.key, r.value) for r in got} == sent
    assert len(got) == len(sent)
    assert {r.partition for r in got} == {0, 1, 2, 3}
    # without an expected count: the idle timeout only starts once every partition reached its advertised
    # end (Tansu's end offset is the start of the last batch + 1), so even idle_s=0 reads everything
    assert {(r.key, r.value) for r in read_topic(kafka, topic, idle_s=0.0)} == sent


def test_broker_lifecycle_and_pid_file(tmp_path) -> None:
    b = EmbeddedBroker(free_port(), state_dir=tmp_path).start()
    try:
        st = b.status()
        assert st.running and st.pid_file.exists()
        with pytest.raises(BrokerError, match="already runs"):
            EmbeddedBroker(b.port, state_dir=tmp_path).start()
        assert AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=5).brokers
    finally:
        assert b.stop()
    assert not b.status().running and not b.pid_file.exists()
    assert not EmbeddedBroker(b.port, state_dir=tmp_path).stop()  # nothing of ours left to stop


def test_port_in_use_is_a_clear_error(broker: EmbeddedBroker, tmp_path) -> None:
    with pytest.raises(BrokerError, match="already in use"):
        EmbeddedBroker(broker.port, state_dir=tmp_path).start()
