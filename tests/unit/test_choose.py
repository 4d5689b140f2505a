"""Field detection and the starter config of ``skewroute init``; a route's sample as a workload."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from router.choose.detect import detect_fields
from router.choose.sample import route_sample, route_spec
from router.choose.starter import Starter, proposed_route, render_starter
from router.extract import SourceRecord
from schemas.settings import RouteSettings, SkewrouteSettings

T0 = 1_767_225_600_000


def Msg(value: bytes | None, key: bytes | None = None, offset: int = 0, ts: int = T0) -> SourceRecord:  # noqa: N802
    """A raw record whose Kafka timestamp advances with its offset."""
    return SourceRecord("t", 0, offset, key, value, ts + offset)


def sample(n: int = 2000, **extra: object) -> list[Msg]:
    users = np.random.default_rng(1).zipf(1.4, n) % 300
    return [
        Msg(orjson.dumps({"id": i, "who": {"user": f"u{u}"}, "at": (T0 + 1000 * i) // 1000, "price": i % 9 + 0.25,
                          "ok": True, "tag": "x", **extra}), key=f"u{u}".encode(), offset=i)
        for i, u in enumerate(users.tolist())
    ]  # fmt: skip


def test_detects_nested_key_epoch_seconds_and_a_float_measure() -> None:
    d = detect_fields(sample())
    assert d.records == d.json_objects == 2000
    assert d.keys[0].label == "who.user"  # repeats; "id" is unique per record, "tag" has one value
    assert "tag" not in {c.label for c in d.keys} and "ok" not in {c.label for c in d.keys}
    assert "kafka_key" in {c.label for c in d.keys}
    assert (d.times[0].label, d.times[0].unit) == ("at", "s") and d.times[-1].label == "kafka_timestamp"
    assert d.measures[0].label == "price" and "at" not in {c.label for c in d.measures}
    assert "ok" not in {c.label for c in d.measures}  # booleans are not measures


def test_detects_iso_times_and_kafka_keys_of_non_json_values() -> None:
    iso = [
        Msg(orjson.dumps({"k": f"a{i % 5}", "when": f"2026-01-01T00:00:{i % 60:02d}Z"}), offset=i) for i in range(50)
    ]
    d = detect_fields(iso)
    assert (d.times[0].label, d.times[0].unit) == ("when", "iso") and d.keys[0].label == "k"
    raw = [Msg(b"not json", key=f"k{i % 3}".encode(), offset=i) for i in range(30)]
    d = detect_fields(raw)
    assert d.json_objects == 0 and [c.label for c in d.keys] == ["kafka_key"]
    assert [c.label for c in d.times] == ["kafka_timestamp"] and d.measures == []
    assert detect_fields([]).records == 0


def test_starter_config_loads_and_says_why(tmp_path: Path) -> None:
    d = detect_fields(sample())
    text = render_starter(Starter("h:1", "clicks.v1", d, d.keys[0], d.times[0], d.measures[0], "pkg:d=4", "because",
                                  ("cam", "hash")))  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(text)
    s = SkewrouteSettings.load(path)
    r = s.route("clicks.v1")
    assert r.key.field == "who.user" and (r.time.field, r.time.unit) == ("at", "s") and r.value_field == "price"
    assert r.partitioner.name == "pkg" and r.partitioner.params()["d"] == 4
    assert r.window.slide * 1 == 5000 and s.spark.trigger_interval == "5 seconds"  # slide = trigger
    assert s.spark.aggregations == ["count", "sum", "min", "max", "mean"]
    assert "who.user: in 100% of records" in text and "<- chosen" in text and "Next best on this sample: cam" in text
    kk = next(c for c in d.keys if c.source == "kafka_key")
    count_only = render_starter(Starter("h:1", "t", d, kk, d.times[-1], None, "hash", "only"))
    path.write_text(count_only)
    s = SkewrouteSettings.load(path)
    assert s.routes[0].key.source == "kafka_key" and s.routes[0].time.source == "kafka_timestamp"
    assert s.routes[0].value_field is None and s.spark.aggregations == ["count"]


def test_route_sample_uses_the_routes_extraction() -> None:
    d = detect_fields(sample(200))
    route = proposed_route("t", d.keys[0], d.times[0], d.measures[0], 4)
    msgs = [*sample(200), Msg(b'{"who": {}}', offset=999)]
    rs = route_sample(route, msgs)
    assert (rs.records, rs.bad, rs.workload.tuples) == (201, 1, 200)
    assert rs.first_error is not None and rs.first_error.startswith("who.user:")
    keys, times = next(rs.workload.batches())
    assert keys[0].startswith("u") and times[0] == 0 and times[5] == 5000  # epoch s -> relative ms
    count = route.model_copy(update={"window": route.window.model_copy(update={"kind": "count"})})
    _, times = next(route_sample(count, msgs).workload.batches())
    assert times.tolist()[:3] == [0, 1, 2]  # a count window: positions
    spec = route_spec(SkewrouteSettings(routes=[route]), route, n=None, c=2.0)
    assert (spec.n, spec.m, spec.window, spec.slide, spec.c) == (4, 8, 60_000.0, 5_000.0, 2.0)


def test_route_sample_of_nothing_routable() -> None:
    route = RouteSettings(raw_topic="t", key={"field": "nope"})
    rs = route_sample(route, sample(10))
    assert rs.workload.tuples == 0 and rs.bad == 10
    with pytest.raises(StopIteration):
        next(rs.workload.batches())


def test_starter_lines_stay_readable(tmp_path: Path) -> None:
    d = detect_fields(sample(300))
    reason = "dalton: T mean 184.9 (p95 193.2) vs cam 428.1; max L 139.3 vs 387.5, " * 3
    text = render_starter(Starter("h:1", "t", d, d.keys[0], d.times[0], None, "dalton:tail=hash", reason))
    assert max(len(line) for line in text.splitlines()) <= 120
    (tmp_path / "s.yaml").write_text(text)
    assert SkewrouteSettings.load(tmp_path / "s.yaml").routes[0].partitioner.params()["tail"] == "hash"


def test_advise_offline_sample_with_a_routes_settings(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from router.cli import app

    jl = tmp_path / "s.jsonl"
    jl.write_text("\n".join(orjson.dumps({"u": {"id": f"k{i % 50}"}, "ts": i}).decode() for i in range(3000)))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("routes:\n  - raw_topic: r1\n    combiners: 4\n    window: {kind: count, size: 500, slide: 100}\n")
    cli = CliRunner()
    res = cli.invoke(
        app, ["advise", "-c", str(cfg), "--route", "r1", "-w", f"file:path={jl},key=u.id", "-p", "hash,pkg"]
    )
    assert res.exit_code == 0, res.output
    assert "recommendation:" in res.output and "file(s.jsonl,key=u.id)" in res.output
    res = cli.invoke(app, ["advise", "-c", str(cfg), "--route", "nope", "-w", f"file:path={jl},key=u.id"])
    assert res.exit_code == 2 and "no route named 'nope'" in res.output
    res = cli.invoke(app, ["advise", "--route", "r1"])
    assert res.exit_code == 2 and "--route needs --config" in res.output


def test_route_sample_of_a_kafka_keyed_topic_follows_the_routed_format() -> None:
    """Values that are not JSON, keyed by Kafka: format 2 routes them (so the sample has them), format 1 does not."""
    msgs = [Msg(b"\x00avro %d" % i, key=b"k%d" % (i % 7), offset=i) for i in range(50)]
    d = detect_fields(msgs)
    kk = next(c for c in d.keys if c.source == "kafka_key")
    route = proposed_route("t", kk, d.times[-1], None, 4)
    assert route.key.source == "kafka_key" and route.time.source == "kafka_timestamp"
    assert (route_sample(route, msgs).workload.tuples, route_sample(route, msgs).bad) == (50, 0)
    assert route_sample(route, msgs, routed_format=1).bad == 50
