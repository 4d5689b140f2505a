"""``skewroute init`` and ``skewroute advise --config`` against a real broker: a live topic is sampled,
its fields are found, the starter config loads, and the advice uses the route's own extraction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from connectors.topic_sample import sample_topic
from router.cli import app
from schemas.exceptions import BrokerError
from schemas.settings import KafkaSettings, SkewrouteSettings
from tests.integration.router_support import RAW_PARTITIONS, produce

pytestmark = pytest.mark.kafka

RECORDS = 4_000
T0 = 1_767_225_600_000  # 2026-01-01 in epoch ms


def events(n: int, seed: int = 3) -> list[tuple[bytes | None, bytes | None]]:
    """Skewed users, event time in ms, a float amount and a constant field (never a key)."""
    rng = np.random.default_rng(seed)
    users = rng.zipf(1.4, n) % 300
    return [
        (None, orjson.dumps({"user": f"u{u}", "ts": T0 + 10 * i, "amount": float(i % 7) + 0.5, "v": 1,
                             "meta": {"country": "fr"}}))
        for i, u in enumerate(users.tolist())
    ]  # fmt: skip


def test_sample_is_bounded_and_balanced_over_partitions(kafka: KafkaSettings, topic: str) -> None:
    produce(kafka, topic, events(400))
    got = sample_topic(kafka, topic, records=100, seconds=20)
    assert len(got) == 100
    per = {p: [m.offset() for m in got if m.partition() == p] for p in range(RAW_PARTITIONS)}
    assert all(len(v) == 25 and v == sorted(set(v)) for v in per.values()), per  # 25 distinct from each
    assert len(sample_topic(kafka, topic, records=1000, seconds=20)) == 400  # all there is: stops when idle
    with pytest.raises(BrokerError, match="does not exist"):
        sample_topic(kafka, topic + "-missing", records=10, seconds=2)


def test_init_writes_a_config_that_loads_and_advise_samples_its_route(
    kafka: KafkaSettings, topic: str, tmp_path: Path
) -> None:
    produce(kafka, topic, events(RECORDS))
    out = tmp_path / "starter.yaml"
    cli = CliRunner()
    res = cli.invoke(
        app,
        ["init", "--bootstrap", kafka.bootstrap_servers, "--topic", topic, "--out", str(out),
         "--records", str(RECORDS), "-p", "hash,shuffle,cam", "-n", "4"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    s = SkewrouteSettings.load(out)
    route = s.route(topic)
    assert route.key.source == "field" and route.key.field == "user"
    assert (route.time.source, route.time.field, route.time.unit) == ("field", "ts", "ms")
    assert route.value_field == "amount" and route.combiners == 4
    assert route.partitioner.name in ("hash", "shuffle", "cam")
    assert s.kafka.bootstrap_servers == kafka.bootstrap_servers
    text = out.read_text()
    assert "<- chosen" in text and "spark.trigger_interval" in text and f"from a sample of {RECORDS:,} records" in text
    assert "meta.country" not in text.split("key:")[0].split("key candidates")[1]  # one value: not a key

    res = cli.invoke(
        app, ["advise", "--config", str(out), "--route", topic, "--records", str(RECORDS), "-p", "hash,shuffle"]
    )
    assert res.exit_code == 0, res.output
    assert f"read {RECORDS:,} records; 0 would be dead-lettered" in res.output
    assert "recommendation:" in res.output and f"topic({topic})" in res.output


def test_advise_counts_what_the_route_would_dead_letter(kafka: KafkaSettings, topic: str, tmp_path: Path) -> None:
    good = events(300)
    produce(kafka, topic, [*good, (None, b'{"ts": 1}'), (None, b"not json")])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"kafka: {{bootstrap_servers: '{kafka.bootstrap_servers}'}}\n"
        f"routes:\n  - raw_topic: {topic}\n    key: {{source: field, field: user}}\n"
        "    window: {kind: count, size: 100, slide: 10}\n"
    )
    res = CliRunner().invoke(app, ["advise", "-c", str(cfg), "--records", "302", "--seconds", "20", "-p", "hash,pkg"])
    assert res.exit_code == 0, res.output
    assert "read 302 records; 2 would be dead-lettered" in res.output
    # the two bad records land on random partitions (no Kafka key): either can be the first one read
    first = ("first bad record: user: key field is missing", "first bad record: value: not valid JSON")
    assert any(reason in res.output for reason in first), res.output


def test_init_refuses_a_missing_topic_and_an_existing_file(kafka: KafkaSettings, topic: str, tmp_path: Path) -> None:
    out = tmp_path / "x.yaml"
    res = CliRunner().invoke(app, ["init", "--bootstrap", kafka.bootstrap_servers, "--topic", topic, "-o", str(out)])
    # a missing topic exits 4, as in every command (README, "Exit codes"); a refused argument 2
    assert res.exit_code == 4 and "does not exist" in res.output and not out.exists()
    out.write_text("keep me")
    res = CliRunner().invoke(app, ["init", "--bootstrap", kafka.bootstrap_servers, "--topic", topic, "-o", str(out)])
    assert res.exit_code == 2 and "--force" in res.output and out.read_text() == "keep me"
