"""router-bench's interleaved pair: both data planes route every record of the topic, and only those."""

from __future__ import annotations

import pytest

from benchmarks.planes import PASSTHROUGH
from benchmarks.router_bench_pair import pair_table, run_pair
from schemas.settings import KafkaSettings
from tests.integration.router_support import produce, routed, zipf_records

pytestmark = pytest.mark.kafka

N = 6000


def test_pair_routes_the_whole_topic_with_both_planes(kafka: KafkaSettings, topic: str) -> None:
    produce(kafka, topic, zipf_records(N, seed=5))
    pair = run_pair(kafka.bootstrap_servers, topic, "cam", n=N, batch=700, combiners=4, timeout=120)
    assert set(pair) == {PASSTHROUGH, "cam"}
    for r in pair.values():
        assert r["ok"] and r["consumed"] == N and r["routed"] == N  # the topic holds exactly N
        assert r["elapsed"] > 0 and r["rate"] == pytest.approx(N / r["elapsed"])
        assert r["thread_cpu_us"] > 0
    assert pair["cam"]["partitioner_us"] > 0 and pair[PASSTHROUGH]["partitioner_us"] < pair["cam"]["partitioner_us"]
    assert routed(kafka, f"{topic}.dlq") == []
    table = "\n".join(pair_table({"w": {"cam": [pair, {"ok": False, "error": "boom"}]}}, 2))
    cam, base = pair["cam"]["rate"], pair[PASSTHROUGH]["rate"]
    assert f"| cam | {cam:,.0f} | {base:,.0f} | {cam / base:.2f} | {cam / base:.2f} |" in table


def test_keyed_pair_routes_on_the_kafka_key(kafka: KafkaSettings, topic: str) -> None:
    """The keyed workloads' routes take the key from the Kafka key: values that are not JSON are routed too."""
    produce(kafka, topic, [(b"k%d" % (i % 50), b"opaque %d" % i) for i in range(N)])
    pair = run_pair(kafka.bootstrap_servers, topic, "hash", n=N, batch=700, combiners=4, timeout=120,
                    key_source="kafka_key", slide=5_000)  # fmt: skip
    assert all(r["ok"] and r["consumed"] == N and r["routed"] == N for r in pair.values())
    assert routed(kafka, f"{topic}.dlq") == []
