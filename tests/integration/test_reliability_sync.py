"""Reducer crash in Dalton sync: the ``skewroute router`` process running the QtableReducer is SIGKILLed.

The in-process version (the reducer's transport closed without a word, rounds go on under the next lowest id)
is ``test_dalton_sync.py::test_three_routers_converge_over_kafka_and_survive_a_dead_reducer``; this one kills a
real worker process while records flow: another worker sends GLOBALs within a bounded time (liveness
timeout max(2 s, 3 x DSYNC) + a couple of DSYNC), the surviving workers keep routing (the sync never blocks
routing; the consumer group's rebalance after the session timeout pauses it for about one group join), the
rounds go on with the survivors as members, and every record still reaches the combiner topic.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest

from benchmarks.demo.processes import Processes, router_command
from benchmarks.soak_parts import ControlWatcher, RawProducer, Verifier, kill_group, worker_config
from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import free_port
from connectors.kafka import make_admin
from router.sync.service import LIVENESS_FLOOR_MS
from schemas.control import GlobalMessage, parse_control
from schemas.settings import KafkaSettings
from tests.integration.router_support import RAW_PARTITIONS, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

DSYNC_MS = 200


def takeover_bound_s(dsync_ms: float) -> float:
    """Dead after the liveness timeout max(2 s, 3 x DSYNC); the next lowest id answers within about 2 DSYNC."""
    return max(LIVENESS_FLOOR_MS, 3 * dsync_ms) / 1000 + 2 * dsync_ms / 1000 + 1.5


def assigned_partitions(port: int) -> int:
    """Raw partitions the worker on ``port`` owns now (its ``skewroute_assigned_partitions``; 0 if not up yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            text = r.read().decode()
    except OSError:
        return 0
    m = re.search(r"^skewroute_assigned_partitions\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    return int(float(m.group(1))) if m else 0


def test_killed_reducer_is_replaced_in_bounded_time_and_routing_goes_on(
    kafka: KafkaSettings, topic: str, tmp_path: Path
) -> None:
    control = f"{topic}.control"
    ensure_topics(make_admin(kafka), [TopicSpec(topic, RAW_PARTITIONS), TopicSpec(control, 1)])
    names = ["wa", "wb", "wc"]
    ports = {n: free_port() for n in names}
    cfgs = {
        n: worker_config(
            tmp_path / f"{n}.yaml", kafka.bootstrap_servers, topic, app_id=f"app-{topic}", instance=n,
            state_dir=tmp_path / n, partitioner={"name": "dalton"},
            router={"control_topic": control, "dsync_ms": DSYNC_MS, "batch_max_records": 1000},
        )
        for n in names
    }  # fmt: skip
    producer = RawProducer(kafka, topic, 1500, partitions=RAW_PARTITIONS, seed=4)
    watcher = ControlWatcher(kafka, control)
    verifier = Verifier(kafka, f"{topic}.combiners", 4)
    with Processes() as procs:
        children = {n: procs.start(n, router_command(cfgs[n], ports[n]), tmp_path / f"{n}.log") for n in names}
        producer.start()

        def rounds_by_wa_with_all() -> bool:
            watcher.poll(0.2)
            verifier.poll(0)
            if sum(1 for _, red, _ in watcher.globals if red == "wa") < 5:
                return False
            # the kill must find a formed group: killed in the middle of the first joins, wa would hold the join
            # for a whole session timeout (measured: no routing at all for ~10 s), which is not this scenario
            owned = [assigned_partitions(ports[n]) for n in names]
            return all(owned) and sum(owned) == RAW_PARTITIONS

        wait_for(rounds_by_wa_with_all, 90, "five rounds reduced by wa (the lowest id), all three workers routing")
        kill_group(children["wa"])
        procs.children.remove(children["wa"])
        killed = time.monotonic()
        flow: list[int] = []  # routed records per second after the kill
        while time.monotonic() - killed < 12:
            before = verifier.records
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                verifier.poll(0.1)
                watcher.poll(0)
            flow.append(verifier.records - before)

        def new_reducer() -> bool:
            watcher.poll(0.2)
            return watcher.takeover_after(killed, "wa") is not None

        wait_for(new_reducer, 30, "a GLOBAL from a new reducer")
        takeover = watcher.takeover_after(killed, "wa")
        producer.stop()
        assert verifier.wait_for(producer.positions(), 60), "records lost"
        assert children["wb"].running and children["wc"].running
    watcher.close()
    verifier.close()
    msgs = [parse_control(r.value) for r in read_topic(kafka, control, idle_s=1.0)]
    globals_ = [m for m in msgs if isinstance(m, GlobalMessage)]
    after = [g for g in globals_ if g.reducer != "wa" and g.round > max(x.round for x in globals_ if x.reducer == "wa")]
    dsync = max(DSYNC_MS, [g for g in globals_ if g.reducer == "wa"][-1].dsync_ms)  # adaptive: as it was at the kill
    bound = takeover_bound_s(dsync)
    print(f"\nreducer takeover after {takeover:.2f} s (bound {bound:.1f} s at DSYNC {dsync} ms); routed per second "
          f"after the kill {flow}; {len(after)} rounds by {sorted({g.reducer for g in after})} after; "
          f"{len(producer.acked)} records, {verifier.duplicates} duplicates")  # fmt: skip
    assert takeover is not None and takeover < bound
    # routing never stopped: the reducer's death does not pause it; the only gap is the consumer group's eager
    # rebalance once the killed worker's session times out (~3 s join), so every 4 s of the run routed records
    assert all(sum(flow[i : i + 4]) > 0 for i in range(len(flow) - 3)), flow
    assert {g.reducer for g in after} == {"wb"} and len(after) >= 10  # learning resumed under the next lowest id
    # the survivors are the members: wa only in the round in flight at the kill; both survivors in most rounds (a
    # round may close with one SYNC during the rebalance, and at the end, when the workers stop one by one)
    assert all("wa" not in g.members for g in after[1:])
    assert sum(g.members == ["wb", "wc"] for g in after) >= len(after) / 2, [g.members for g in after]
    rounds = [g.round for g in after]
    assert rounds == sorted(rounds) and len(set(rounds)) == len(rounds)
