"""The starter config ``skewroute init`` writes: one route for a topic, every choice explained in comments."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from datetime import UTC, datetime

from connectors.workload_types import parse_spec
from router.choose.detect import Candidate, Detected
from schemas.settings import KeySpec, RouteSettings, TimeSpec, WindowSettings

__all__ = ["Starter", "proposed_route", "render_starter"]

#: The starter's windows (ms): the router's slide equals Spark's trigger interval (see WINDOWS_TEXT).
TRIGGER_MS = 5_000
ROUTER_WINDOW_MS = 60_000
SPARK_WINDOW = "10 seconds"
WATERMARK = "10 seconds"

WINDOWS_TEXT = """\
    # How the four windows relate (each is its own setting; these values keep them consistent):
    # - window.slide: the router's statistics step, in ms of event time (tuples with kind: count). Dalton's
    #   hot-key statistics and the load/replication metrics cover one slide. Keep it equal to
    #   spark.trigger_interval: Spark pre-aggregates each micro-batch per combiner, so a key split over k
    #   combiners costs k partials per micro-batch, and the router should count splits over that same span.
    # - window.size: how much recent history the partitioner weighs (load per combiner, where a key already
    #   went): a whole number of slides, here {slides}. Longer = steadier choices, slower to follow a shift.
    # - spark.trigger_interval: how often Spark reads a micro-batch (latency against per-batch overhead).
    # - spark.window (+ spark.slide): the window of the RESULTS, per key. It does not have to match the router's
    #   window, which only decides where records go; spark.watermark is how late (event time) a record may
    #   arrive and still be counted: at least the delay between a record's event time and Spark reading it."""


WORKERS_TEXT = """\
  # Start as many workers as you like from this file, on one host or many. Each takes the lowest free slot on
  # its host: its instance id is <hostname>-<slot> and its web server (/metrics, /ready; `skewroute status`
  # reads them) listens on 127.0.0.1:6066+slot (the next free port if that is taken). Set router.web_host
  # (e.g. 0.0.0.0) to serve other hosts, router.web_port to fix the port."""

DELIVERY_TEXT = """\
  # Exact after a crash: the routers run at least once (router.delivery: at_least_once, works on every broker):
  # a worker killed mid-batch re-routes what it had produced but not yet committed. dedupe drops those copies
  # on their source position (topic, partition, offset), so no window counts a record twice. It costs the
  # pre-aggregation (Spark shuffles records instead of partials). On Apache Kafka you may instead set
  # router.delivery: exactly_once (Kafka transactions; each worker's id is derived) and dedupe: false."""


@dataclass(frozen=True)
class Starter:
    """What the starter config says, before rendering."""

    bootstrap: str
    topic: str
    detected: Detected
    key: Candidate
    time: Candidate
    measure: Candidate | None
    partitioner: str  # a label such as "cam" or "pkg:d=4"
    reason: str  # why this partitioner
    alternatives: tuple[str, ...] = ()
    combiners: int = 8


def proposed_route(topic: str, key: Candidate, time: Candidate, measure: Candidate | None, n: int) -> RouteSettings:
    """The route the starter writes (the partitioner left at its default), for sampling and advice."""
    key_spec = KeySpec(source="kafka_key", field=None) if key.source == "kafka_key" else KeySpec(field=key.path)
    time_spec = (
        TimeSpec(source="field", field=time.path, unit=time.unit) if time.source == "field" else TimeSpec()
    )  # fmt: skip
    return RouteSettings(
        raw_topic=topic,
        combiners=n,
        key=key_spec,
        time=time_spec,
        value_field=measure.path if measure else None,
        window=WindowSettings(kind="time", size=ROUTER_WINDOW_MS, slide=TRIGGER_MS),
    )


def _flow(mapping: dict[str, object]) -> str:
    return "{" + ", ".join(f"{k}: {json.dumps(v) if isinstance(v, str) and not v.isidentifier() else v}"
                           for k, v in mapping.items()) + "}"  # fmt: skip


def _evidence(c: Candidate, chosen: Candidate | None, unit: bool) -> str:
    mark = "   <- chosen" if chosen is not None and c == chosen else ""
    if c.source == "kafka_timestamp":
        return f"    #   kafka_timestamp (the record's Kafka timestamp){mark}"
    shown = f" (unit {c.unit})" if unit else ""
    distinct = f", {c.distinct:,} distinct" if c.distinct else ""
    return f"    #   {c.label}{shown}: in {c.present:.0%} of records{distinct}, e.g. {c.example!r}{mark}"


def _list(title: str, cands: list[Candidate], chosen: Candidate | None, unit: bool = False) -> list[str]:
    if not cands:
        return [f"    # {title}: none found"]
    return [f"    # {title}:"] + [_evidence(c, chosen, unit) for c in cands[:5]]


def _partitioner_yaml(label: str) -> str:
    name, params = parse_spec(label)
    return _flow({"name": name, **params})


def render_starter(s: Starter) -> str:
    """The YAML text (valid for ``SkewrouteSettings.load``) with comments on every choice."""
    d = s.detected
    key = "{source: kafka_key}" if s.key.source == "kafka_key" else _flow({"source": "field", "field": s.key.path})
    time = (
        _flow({"source": "field", "field": s.time.path, "unit": s.time.unit})
        if s.time.source == "field"
        else "{source: kafka_timestamp}"
    )
    aggregations = "[count, sum, min, max, mean]" if s.measure else "[count]"
    lines = [
        f"# skewroute starter config for topic {s.topic!r}: written by `skewroute init` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"# from a sample of {d.records:,} records ({d.json_objects:,} JSON objects). Check the choices, then run",
        "#   skewroute router --config THIS_FILE      and      skewroute spark-job --config THIS_FILE",
        "# Any setting can be overridden by an environment variable: SKEWROUTE_<SECTION>__<FIELD>",
        "# (e.g. SKEWROUTE_KAFKA__BOOTSTRAP_SERVERS); secrets (SASL passwords) belong there, not in this file.",
        "kafka:",
        f"  bootstrap_servers: {json.dumps(s.bootstrap)}",
        "routes:",
        f"  - raw_topic: {json.dumps(s.topic)}",
        "    # n: partitions of the combiner topic <raw_topic>.combiners = the Spark tasks that pre-aggregate",
        "    # each micro-batch; the parallelism of the first aggregation step.",
        f"    combiners: {s.combiners}",
        *_list("key candidates (the record's group: results are per key)", d.keys, s.key),
        f"    key: {key}",
        *_list("event-time candidates", d.times, s.time, unit=True),
        f"    time: {time}",
        *_list(
            "measure candidates (numbers for sum/min/max/mean; leave value_field out to count only)",
            d.measures,
            s.measure,
        ),  # fmt: skip
        f"    value_field: {s.measure.path}" if s.measure else "    # value_field: none found",
        WINDOWS_TEXT.format(slides=ROUTER_WINDOW_MS // TRIGGER_MS),
        f"    window: {{kind: time, size: {ROUTER_WINDOW_MS}, slide: {TRIGGER_MS}}}",
        *textwrap.wrap(
            f"partitioner: measured on the sample by `skewroute advise`: {s.reason}",
            110,
            initial_indent="    # ",
            subsequent_indent="    #   ",
        ),
        "    # Any other can be swapped in (same key, time and windows): hash (no splitting: keys stay whole),",
        "    # pkg / cam / am (two choices per key), dalton (splits only hot keys), shuffle (balance, splits all).",
        *([f"    # Next best on this sample: {', '.join(s.alternatives)}."] if s.alternatives else []),
        f"    partitioner: {_partitioner_yaml(s.partitioner)}",
        "router:",
        f"  app_id: {json.dumps('skewroute-' + s.topic)}",
        *WORKERS_TEXT.splitlines(),
        "spark:",
        f'  trigger_interval: "{TRIGGER_MS // 1000} seconds"   # = the route\'s window.slide',
        f'  window: "{SPARK_WINDOW}"',
        f'  watermark: "{WATERMARK}"',
        f"  aggregations: {aggregations}",
        "  sink: kafka                    # final aggregates to <raw_topic>.results",
        *DELIVERY_TEXT.splitlines(),
        "  dedupe: true",
        "",
    ]
    return "\n".join(lines)
