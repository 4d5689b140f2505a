"""SASL/SCRAM for every client and ACLs on Apache Kafka: only router principals can write the control topic.

One Apache Kafka node with a SASL_PLAINTEXT (SCRAM-SHA-256) listener and the standard ACL authorizer (nothing
allowed without an ACL). Principals: ``admin`` (super user: creates ACLs), ``router`` (all on the route's
topics, groups and transactional ids), ``spark`` (reads the combiner topic, writes the results topic) and
``intruder`` (may read the control topic, nothing else). Two router worker processes (Faust app, data plane,
Dalton sync over the control topic) route everything as ``router``; a Spark run as ``spark`` gives the exact
aggregates; the broker refuses the intruder's write to the control topic and a client without credentials.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from benchmarks.demo.processes import Processes, router_command
from benchmarks.soak_parts import Verifier, worker_config
from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_topics
from connectors.apache_kafka import ApacheKafkaCluster
from connectors.broker import free_port
from connectors.kafka import make_admin
from schemas.exceptions import BrokerError
from schemas.settings import KafkaSettings, SkewrouteSettings
from tests.integration.router_support import RAW_PARTITIONS, produce, routed, run_plane, settings, zipf_records
from tests.integration.spark_support import assert_same, raw_recs, read_results, reference, run_available_now

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka]

N = 6_000
USERS = {"admin": "admin-secret", "router": "router-secret", "spark": "spark-secret", "intruder": "intruder-secret"}


def _sasl(bootstrap: str, user: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="SCRAM-SHA-256", sasl_username=user, sasl_password=USERS[user])  # fmt: skip


def _acl(kind: ResourceType, name: str, user: str, op: AclOperation, prefixed: bool = True) -> AclBinding:
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    return AclBinding(kind, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)


TOPIC, CONTROL, APP = "secure-raw", "secure-raw.control", "app-secure"
TOPIC2 = "secure-raw-2"  # the long test's route (same prefixes: the router's ACLs cover it)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaCluster]:
    """One SASL/SCRAM Apache Kafka node with the ACLs of the module docstring."""
    cluster = ApacheKafkaCluster(port=free_port(), state_dir=tmp_path_factory.mktemp("kafka"), scram_users=USERS)
    with cluster:
        admin = make_admin(_sasl(cluster.bootstrap, "admin"))
        topic, control, app = TOPIC, CONTROL, APP
        acls = [
            _acl(ResourceType.TOPIC, topic, "router", AclOperation.ALL),  # raw, combiners, dlq, control
            _acl(ResourceType.GROUP, app, "router", AclOperation.ALL),
            _acl(ResourceType.TRANSACTIONAL_ID, app, "router", AclOperation.ALL),
            _acl(ResourceType.BROKER, "kafka-cluster", "router", AclOperation.ALL, prefixed=False),  # Faust admin
            *(_acl(ResourceType.TOPIC, f"{t}.combiners", "spark", AclOperation.READ, False) for t in (topic, TOPIC2)),
            *(_acl(ResourceType.TOPIC, f"{t}.results", "spark", AclOperation.ALL, False) for t in (topic, TOPIC2)),
            # readers here (Spark's Python source, the test's readers) assign partitions, never join, but
            # librdkafka still looks up their group's coordinator
            *(_acl(ResourceType.GROUP, "skewroute", u, AclOperation.READ) for u in ("router", "spark", "intruder")),
            *(
                _acl(ResourceType.TOPIC, c, "intruder", op, False)
                for c in (control, f"{TOPIC2}.control")
                for op in (AclOperation.READ, AclOperation.DESCRIBE)
            ),
        ]
        for f in admin.create_acls(acls).values():
            f.result(30)
        ensure_topics(admin, [TopicSpec(topic, RAW_PARTITIONS), TopicSpec(control, 1)])
        yield cluster


def _refused(boot: str, control: str) -> None:
    """The intruder may read the control topic, the broker refuses its writes; no credentials: no entry."""
    errors: list[KafkaError] = []
    p = Producer({**_sasl(boot, "intruder").librdkafka("producer"), "message.timeout.ms": 10_000})
    p.produce(control, b"forged", on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors[0]
    plain = make_admin(KafkaSettings(bootstrap_servers=boot), **{"socket.connection.setup.timeout.ms": 2000})
    with pytest.raises(KafkaException):
        plain.list_topics(timeout=5)


def test_data_plane_over_scram_and_a_foreign_control_writer_refused(secure: ApacheKafkaCluster) -> None:
    """Short (default run): the data plane routes as ``router``; ``intruder``'s control write is refused."""
    boot = secure.bootstrap
    router_kafka = _sasl(boot, "router")
    records = zipf_records(2_000, seed=52)
    produce(_sasl(boot, "admin"), TOPIC, records)
    s = settings(router_kafka, TOPIC, APP, router={"delivery": "exactly_once", "instance_id": "w1"})
    run_plane(s, len(records))
    assert len(routed(router_kafka, f"{TOPIC}.combiners", expected=len(records))) == len(records)
    with pytest.raises(BrokerError, match="does not exist"):  # spark may not even see the raw topic (no ACL)
        read_topic(_sasl(boot, "spark"), TOPIC, idle_s=1.0, timeout_s=20)
    _refused(boot, CONTROL)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.extended
def test_scram_everywhere_and_only_routers_write_the_control_topic(
    secure: ApacheKafkaCluster, tmp_path: Path, spark
) -> None:
    """Long (extended): two worker processes (Faust, data plane, Dalton sync) and Spark, all over SCRAM."""
    cluster = secure
    boot = cluster.bootstrap
    admin_kafka, router_kafka, spark_kafka = (_sasl(boot, u) for u in ("admin", "router", "spark"))
    topic, control, app = TOPIC2, f"{TOPIC2}.control", f"{APP}-2"
    ensure_topics(make_admin(admin_kafka), [TopicSpec(topic, RAW_PARTITIONS), TopicSpec(control, 1)])
    records = zipf_records(N, seed=51)
    produce(admin_kafka, topic, records)

    ports = {n: free_port() for n in ("wa", "wb")}
    spark_cfg = {"dedupe": False, "isolation_level": "read_committed", "watermark": "1 hour",
                 "window": "10 seconds", "checkpoint_dir": str(tmp_path / "ck"),
                 "progress_log": str(tmp_path / "progress.jsonl")}  # fmt: skip
    cfgs = {}
    for n in ports:
        path = worker_config(
            tmp_path / f"{n}.yaml", boot, topic, app_id=app, instance=n, state_dir=tmp_path / n,
            partitioner={"name": "dalton"}, route={"value_field": "i"},
            router={"control_topic": control, "dsync_ms": 500, "batch_max_records": 500,
                    "delivery": "exactly_once"},
            spark=spark_cfg,
        )  # fmt: skip
        doc = yaml.safe_load(path.read_text())
        doc["kafka"] = {**router_kafka.model_dump(mode="json"), "sasl_password": USERS["router"]}
        path.write_text(yaml.safe_dump(doc))
        cfgs[n] = path
    verifier = Verifier(router_kafka, f"{topic}.combiners", 4, "read_committed")
    positions = {(topic, i % RAW_PARTITIONS, i // RAW_PARTITIONS) for i in range(N)}
    with Processes() as procs:
        workers = [procs.start(n, router_command(cfgs[n], ports[n]), tmp_path / f"{n}.log") for n in ports]
        assert verifier.wait_for(positions, 180), f"{sum(p not in verifier.seen for p in positions)} never routed"
        control_records = read_topic(router_kafka, control, idle_s=1.0)
        assert all(w.running for w in workers), [w.log_tail() for w in workers if not w.running]
    verifier.close()
    assert verifier.duplicates == 0
    assert control_records, "the routers never synced over the control topic"

    assert read_topic(_sasl(boot, "intruder"), control, idle_s=1.0)  # may read the control topic
    _refused(boot, control)

    # Spark (Python source and the Kafka sink) as the spark principal
    settings = SkewrouteSettings.load(cfgs["wa"]).model_copy(update={"kafka": spark_kafka})
    t0 = time.monotonic()
    run_available_now(spark, settings)
    recs = raw_recs(read_topic(admin_kafka, topic, expected=N))
    assert_same(read_results(spark_kafka, f"{topic}.results"), reference(recs, 10_000, 10_000))
    print(f"\nSASL: control records {len(control_records)}; spark {time.monotonic() - t0:.1f} s")
