"""Static group membership (``router.static_membership: auto``): on for Apache Kafka, off for Tansu.

With ``group.instance.id`` a worker SIGKILLed and restarted within ``session.timeout.ms`` rejoins as the same
member: the broker hands it its old partitions back and the other worker's assignment is never touched (its
rebalance counter does not move), where a dynamic member would cost two rebalances (one when the dead member
expires, one when the new one joins). A static member that stays dead is expired after ``session.timeout.ms``
and the survivor takes its partitions. Tansu never expires a dead static member, so ``auto`` leaves it off there.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from benchmarks.demo.processes import Child, Processes, router_command
from benchmarks.soak_parts import kill_group, worker_config
from connectors.admin import TopicSpec, ensure_topics
from connectors.apache_kafka import ApacheKafkaCluster
from connectors.broker import EmbeddedBroker, free_port
from connectors.broker_traits import resolve_static_membership
from connectors.kafka import make_admin
from router.commands.worker import scrape
from schemas.settings import KafkaSettings
from tests.integration.router_support import RAW_PARTITIONS, wait_for
from tests.integration.test_router_shutdown import _routes

pytestmark = pytest.mark.kafka

SESSION_MS = 15_000  # long enough for a worker process to restart on a loaded machine


def _assigned(port: int, route: str) -> list[int]:
    return sorted(_routes(port).get("routes", {}).get(route, {}).get("assigned", []))


def _rebalances(port: int, route: str) -> float:
    return scrape(f"http://127.0.0.1:{port}/metrics")[route].values["skewroute_rebalances_total"]


def _config(path: Path, kafka: KafkaSettings, topic: str, name: str, tmp_path: Path) -> Path:
    worker_config(path, kafka.bootstrap_servers, topic, app_id=f"app-{topic}", instance=name,
                  state_dir=tmp_path / name, router={"batch_max_records": 300})  # fmt: skip
    cfg = yaml.safe_load(path.read_text())  # static_membership left at its default, auto
    cfg["kafka"]["consumer"] = {"session.timeout.ms": SESSION_MS}
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.apache_kafka
def test_auto_resolves_per_broker(broker: EmbeddedBroker, apache_kafka: ApacheKafkaCluster) -> None:
    tansu = KafkaSettings(bootstrap_servers=broker.bootstrap)
    apache = KafkaSettings(bootstrap_servers=apache_kafka.bootstrap)
    assert resolve_static_membership("auto", "w1", apache)[0] is True
    assert resolve_static_membership("auto", "w1", tansu) == (False, "auto: the broker is tansu (it may never "
                                                                     "expire a dead static member)")  # fmt: skip
    assert resolve_static_membership("auto", None, apache) == (False, "auto: no explicit router.instance_id")
    assert resolve_static_membership(True, "w1", tansu)[0] is True  # explicit values are honoured as given
    assert resolve_static_membership(False, "w1", apache)[0] is False


@pytest.mark.apache_kafka
@pytest.mark.slow
def test_restart_keeps_the_assignment_and_a_dead_static_member_expires(
    apache_kafka: ApacheKafkaCluster, topic: str, tmp_path: Path
) -> None:
    kafka = KafkaSettings(bootstrap_servers=apache_kafka.bootstrap)
    ensure_topics(make_admin(kafka), [TopicSpec(topic, RAW_PARTITIONS)])
    ports = {"wa": free_port(), "wb": free_port()}
    cfgs = {n: _config(tmp_path / f"{n}.yaml", kafka, topic, n, tmp_path) for n in ports}

    def start(procs: Processes, name: str) -> Child:
        return procs.start(name, router_command(cfgs[name], ports[name]), tmp_path / f"{name}.log")

    def split() -> bool:
        a, b = _assigned(ports["wa"], topic), _assigned(ports["wb"], topic)
        return bool(a) and bool(b) and sorted(a + b) == list(range(RAW_PARTITIONS))

    with Processes() as procs:
        wa = start(procs, "wa")
        start(procs, "wb")
        wait_for(split, 90, "both workers to share the partitions")
        time.sleep(2.0)  # let the group settle (no join in flight)
        before_a, before_b = _assigned(ports["wa"], topic), _assigned(ports["wb"], topic)
        rebalances_b = _rebalances(ports["wb"], topic)

        kill_group(wa)  # a crash, then an immediate restart: a rolling restart's worst case
        procs.children.remove(wa)
        killed = time.monotonic()
        wa = start(procs, "wa")
        wait_for(lambda: bool(_assigned(ports["wa"], topic)), SESSION_MS / 1000, "wa to get partitions back")
        back = time.monotonic() - killed
        time.sleep(2.0)  # a rebalance triggered by the rejoin would show by now
        assert _assigned(ports["wa"], topic) == before_a  # its own partitions, handed back by the broker
        assert _assigned(ports["wb"], topic) == before_b
        assert _rebalances(ports["wb"], topic) == rebalances_b  # wb never saw a revocation or an assignment
        assert "static group membership on as wa" in (tmp_path / "wa.log").read_text()

        kill_group(wa)  # now it stays dead: the broker expires it after the session timeout
        procs.children.remove(wa)
        killed = time.monotonic()
        wait_for(lambda: len(_assigned(ports["wb"], topic)) == RAW_PARTITIONS, SESSION_MS / 1000 + 20,
                 "wb to take the dead static member's partitions")  # fmt: skip
        takeover = time.monotonic() - killed
    print(f"\nrestart: partitions back after {back:.1f} s, no rebalance on wb; "
          f"dead static member taken over after {takeover:.1f} s (session {SESSION_MS / 1000:.0f} s)")  # fmt: skip
    assert takeover >= SESSION_MS / 1000 - 1.0  # not before the session expired (a static member never leaves)
