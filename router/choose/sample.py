"""A sample of raw records, extracted as a route would extract them, as a benchmark workload.

The key and event time of each record come from :class:`router.extract.Extractor` with the route's own
settings, so the advisor measures the keys the router will see. Records the route would dead-letter are
counted and left out. With a count window the stream's time is the record's position in the sample (the
router counts tuples); with a time window it is the extracted event time (ms).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from connectors.workload_types import DEFAULT_BATCH, Batch, Workload
from router.choose.runner import BenchSpec
from router.extract import Extracted, Extractor, RawMessage
from schemas.settings import RouteSettings, SkewrouteSettings

__all__ = ["RouteSample", "route_sample", "route_spec"]


@dataclass(frozen=True)
class RouteSample:
    """The workload built from a sample, and what extraction dropped."""

    workload: Workload
    records: int  # records read
    bad: int  # records the route would dead-letter
    first_error: str | None  # the first bad record's reason, naming the field


def route_sample(
    route: RouteSettings, messages: Sequence[RawMessage], name: str | None = None, *, routed_format: int = 2
) -> RouteSample:
    """Extract ``messages`` with ``route``'s settings into a replayable workload (keys, times).

    ``routed_format``: the routers' (``router.routed_format``); under format 2 a route that reads nothing from
    the values accepts any bytes, as the router does (so the count of records it would dead-letter is right).
    """
    ex: Extracted = Extractor(route, vectorized=routed_format == 2).extract(messages)
    keys = np.array(ex.keys, dtype=str)
    if route.window.kind == "count" or not ex.times:
        times = np.arange(len(ex.keys), dtype=np.int64)
    else:
        times = np.asarray(ex.times, dtype=np.int64)
        times = times - times.min()  # relative event time: windows line up with the sample's start

    def make() -> Iterator[Batch]:
        for i in range(0, len(keys), DEFAULT_BATCH):
            yield keys[i : i + DEFAULT_BATCH], times[i : i + DEFAULT_BATCH]

    label = name or f"topic({route.raw_topic})"
    wl = Workload(
        label,
        make,
        len(keys),
        window=route.window.size,
        slide=route.window.slide,
        description=f"{len(keys):,} records sampled from {route.raw_topic!r}, key {_key_text(route)}, "
        f"{route.window.kind} window {route.window.size:g}/{route.window.slide:g}",
    )
    first = f"{ex.bad[0].error}" if ex.bad else None
    return RouteSample(wl, len(messages), len(ex.bad), first)


def _key_text(route: RouteSettings) -> str:
    return "the Kafka key" if route.key.source == "kafka_key" else f"field {route.key.field!r}"


def route_spec(settings: SkewrouteSettings, route: RouteSettings, **overrides: object) -> BenchSpec:
    """The benchmark spec of ``route``: its combiners, window and seed; Spark's reducers; ``overrides`` win."""
    base: dict[str, object] = {
        "n": route.combiners,
        "m": settings.spark.shuffle_partitions,
        "window": float(route.window.size),
        "slide": float(route.window.slide),
        "seed": route.seed,
    }
    base.update({k: v for k, v in overrides.items() if v is not None})
    return BenchSpec(**base)  # type: ignore[arg-type]
