"""A hostile writer on the real control topic: claims the lowest id, sends oversized GLOBALs and a zip bomb.

Two honest workers sync on their own threads (DSYNC 100 ms, liveness timeout 1 s, takeover 2 s). Meanwhile
a plain producer writes, every 100 ms, a SYNC as instance ``"0"`` (the lowest id: elected, never answers),
and every 500 ms a 1.5 MB GLOBAL and a small value inflating to 8 MB. The rounds must resume within the
takeover timeout (plus a round), and the honest nodes' state must stay small.
"""

from __future__ import annotations

import threading
import time
import zlib

import orjson
import pytest

from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin, make_producer
from router.partitioners.dalton import DaltonPartitioner
from router.sync import DirectPort, DsyncPolicy, NodeConfig, SyncNode
from router.sync.kafka import KafkaSyncTransport, wall_ms
from schemas.control import GlobalMessage, SyncMessage, encode_control
from schemas.settings import KafkaSettings

pytestmark = pytest.mark.kafka

N = 8


def _hostile(kafka: KafkaSettings, topic: str, stop: threading.Event, started: list[float]) -> None:
    producer = make_producer(kafka, **{"message.max.bytes": 4_000_000, "compression.type": "none"})
    rows = {str(k): [0.123456789] * N for k in range(20_000)}  # ~1.5 MB of JSON, uncompressed on purpose
    big = GlobalMessage(deployment="h", route="r", combiners=N, reducer="0", round=10**6, dsync_ms=1, q_table=rows)
    oversized = orjson.dumps(big.model_dump())
    bomb = b"\x01" + zlib.compress(b" " * 8_000_000, 9)
    seq = 0
    while not stop.is_set():
        seq += 1
        msg = SyncMessage(deployment="h", route="r", instance="0", seq=seq, records=1, combiners=N,
                          sent_ms=int(wall_ms()))  # fmt: skip
        producer.produce(topic, encode_control(msg), b"r", partition=0)
        if seq % 5 == 0:
            producer.produce(topic, oversized, b"r", partition=0)
            producer.produce(topic, bomb, b"r", partition=0)
        producer.poll(0)
        if not started:
            producer.flush(5)
            started.append(wall_ms())  # the first hostile SYNC is on the topic
        stop.wait(0.1)
    producer.flush(5)


def test_hostile_writer_on_the_broker(kafka: KafkaSettings, topic: str) -> None:
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 1)])
    start = wall_ms()
    nodes = [
        SyncNode(
            DirectPort(DaltonPartitioner(N, window=60_000, slide=1_000, placement="bandit"), window_per_clock=None),
            NodeConfig(
                deployment="h",
                route="r",
                instance=f"w{i}",
                combiners=N,
                dsync=100,
                policy=DsyncPolicy(100, 100),
                liveness_floor=1_000,
                stale_before=start,
            ),  # fmt: skip
        )
        for i in range(2)
    ]
    transports = [KafkaSyncTransport(kafka, topic, [nd], poll_s=0.01) for nd in nodes]
    stop = threading.Event()
    leaders: list[str | None] = []
    started: list[float] = []
    writer = threading.Thread(target=_hostile, args=(kafka, topic, stop, started), daemon=True)
    takeover = nodes[1].takeover_timeout()
    try:
        for t in transports:
            t.start()
        time.sleep(1.0)
        writer.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not started:
            time.sleep(0.05)
        assert started, "the hostile writer never wrote"
        attacked = started[0]
        time.sleep((2 * takeover + 3_000) / 1000)  # under attack for two takeover timeouts and more
        ended = wall_ms()
        leaders = [nd.leader(ended) for nd in nodes]
    finally:
        stop.set()
        writer.join(10)
        for t in transports:
            t.stop()
    takeover = nodes[1].takeover_timeout()
    gaps = []
    for nd in nodes:
        times = [attacked, *(sent for sent, _, by in nd.stats.rounds if attacked < sent <= ended), ended]
        gaps.append(max(b - a for a, b in zip(times, times[1:], strict=False)))  # the tail counts too
    print(
        f"\nhostile writer: longest gap between GLOBALs {gaps} ms (takeover timeout {takeover:.0f} ms); "
        f"ignored {[dict(nd.stats.ignored) for nd in nodes]}; deposed {[nd.stats.deposed for nd in nodes]}; "
        f"pending {[nd.reducer.pending_syncs() for nd in nodes]}; errors {[t.errors for t in transports]}; "
        f"elected at the end {leaders}"
    )
    assert all(g <= takeover + 1_000 for g in gaps), gaps
    assert all(leader != "0" for leader in leaders), leaders  # deposed (or not live) in the end
    assert all(nd.stats.ignored["malformed"] >= 2 for nd in nodes)  # the oversized GLOBALs and the bombs
    assert all(nd.reducer.pending_syncs() <= 2 * 3 * 8 and nd.reducer.round < 10**6 for nd in nodes)
