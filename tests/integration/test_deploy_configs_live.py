"""The shipped configs run: ``skewroute router`` serves both routes of several-routes.yaml on the broker
fixture (every record reaches its route's combiner topic, then SIGTERM ends it cleanly), and every config's
Spark job (source, parse, watermark, aggregation) is built on a real Spark session."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from benchmarks.demo.processes import Processes, router_command
from connectors.broker import free_port
from schemas.settings import KafkaSettings, SkewrouteSettings
from spark_consumers.job import aggregate_stream, read_combiners
from tests.integration.router_support import produce, routed, wait_for
from tests.integration.test_router_shutdown import _routes

CONFIGS = Path(__file__).resolve().parents[2] / "deploy" / "configs"
N = 400


def fresh_copy(path: Path, tmp: Path, topics: dict[str, str]) -> Path:
    """The shipped config with its raw topics renamed (the session broker is shared by every test)."""
    text = path.read_text()
    for old, new in topics.items():
        text = text.replace(f"raw_topic: {old}\n", f"raw_topic: {new}\n")
    out = tmp / path.name
    out.write_text(text)
    return out


@pytest.mark.kafka
@pytest.mark.slow  # ~25 s on a loaded 2-core machine (worker start-up, group joins for two routes)
def test_router_starts_on_the_several_routes_config(kafka: KafkaSettings, topic: str, tmp_path: Path) -> None:
    topics = {"clicks": f"{topic}-clicks", "orders": f"{topic}-orders"}
    cfg = fresh_copy(CONFIGS / "several-routes.yaml", tmp_path, topics)
    clicks = [(None, orjson.dumps({"page": f"p{i % 7 if i % 3 else 0}"})) for i in range(N)]
    orders = [
        (None, orjson.dumps({"customer": {"id": f"c{i % 40}"}, "created_at": f"2026-01-01T00:{i // 60 % 60:02d}:"
                             f"{i % 60:02d}Z", "total": i % 5 + 0.5}))
        for i in range(N)
    ]  # fmt: skip
    produce(kafka, topics["clicks"], clicks)
    produce(kafka, topics["orders"], orders)
    web = free_port()
    env = {
        "SKEWROUTE_KAFKA__BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "SKEWROUTE_ROUTER__APP_ID": f"app-{topic}",
        "SKEWROUTE_ROUTER__CONTROL_TOPIC": f"{topic}.control",
        "SKEWROUTE_ROUTER__STATE_DIR": str(tmp_path / "state"),
        "SKEWROUTE_ROUTER__LOG_FORMAT": "text",
    }
    with Processes() as procs:
        w = procs.start("router", router_command(cfg, web), tmp_path / "router.log", env=env)

        def consumed() -> dict[str, int]:
            return {r: int(v.get("consumed", 0)) for r, v in _routes(web).get("routes", {}).items()}

        try:
            wait_for(lambda: consumed().get("clicks", 0) >= N and consumed().get("orders", 0) >= N, 120, "routing")
        except AssertionError:
            raise AssertionError(w.tail()) from None
        procs.stop(w)
        assert w.proc.returncode == 0, w.tail()
    s = SkewrouteSettings.load(cfg)
    for route, records, key in (("clicks", clicks, lambda d: d["page"]), ("orders", orders,
                                lambda d: d["customer"]["id"])):  # fmt: skip
        r = s.route(route)
        out = routed(kafka, r.combiner_topic_name, expected=N)
        assert Counter(d["k"] for _, d in out) == Counter(key(orjson.loads(v)) for _, v in records), route
        assert {rec.partition for rec, _ in out} <= set(range(r.combiners))


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_spark_job_builds_for_every_config(spark: object, name: str) -> None:
    s = SkewrouteSettings.load(CONFIGS / name)
    for route in s.routes:
        df = aggregate_stream(read_combiners(spark, s.kafka, route, s.spark), s.spark)  # type: ignore[arg-type]
        assert df.isStreaming
        assert df.columns == ["window_start", "window_end", "key", *s.spark.aggregations]
