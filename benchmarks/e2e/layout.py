"""What a topic's layout costs the Spark job: partials and event-time spread of its micro-batches, without Spark.

The job's combiner stage ships one partial per (task, window, key) of each micro-batch, a task being one Kafka
partition of the topic it reads (the raw topic for ``direct``, the combiner topic for a routed configuration).
Its micro-batches are offset ranges planned by :func:`connectors.offset_ranges.distribute_budget` (``availableNow``
with ``maxOffsetsPerTrigger``: every partition advances by the same fraction of its backlog). So the partials of a
drain follow from the topic's layout alone -- which (key, event time) sits at which offset of which partition --
and :func:`simulate` counts them from a topic read back, along with each micro-batch's event-time spread (how far
apart in event time the records one micro-batch takes are) and how many of its records lie behind the event time
earlier micro-batches reached (out of order: what the watermark sees as late).

``python -m benchmarks.e2e.layout`` routes a backlog like ``skewroute e2e-bench`` does (the same keyed raw topic,
the same router workers and settings), reads the topic each configuration's job would read back, and prints
these figures per configuration: a minute's check of the router's output order, where ``e2e-bench`` takes a
Spark session per configuration. With ``--rate R`` the records are produced live, at ``R`` per second with event
times ``1 / R`` apart (the routers start first and keep up), and a micro-batch is what a live trigger reads: the
records of ``--trigger-ms`` of event time (:func:`simulate_live`). Settings
to measure go in ``--override`` (JSON merged into the settings file; ``routes`` item by item)::

    python -m benchmarks.e2e.layout -n 8 --configs dalton --routers 4 --rate 20000 \
        --override '{"routes": [{"partitioner": {"plan_together": true}}]}'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from connectors.offset_ranges import distribute_budget

__all__ = ["BatchLayout", "Layout", "simulate"]


@dataclass(frozen=True)
class BatchLayout:
    """One simulated micro-batch."""

    records: int
    partials: int  # distinct (partition, window, key)
    spread_ms: int  # newest minus oldest event time of the batch (all partitions)
    partition_spread_ms: int  # the largest spread within one partition
    behind: int  # records older than the newest event time of the earlier micro-batches
    behind_ms: int  # how far the oldest of them lies behind that time
    max_mean: float = 0.0  # the partitions' (tasks') records: the largest over their mean
    groups: int = 0  # distinct (window, key) over all partitions: the final aggregate's rows it touches


@dataclass(frozen=True)
class Layout:
    """A drain simulated on one topic."""

    batches: list[BatchLayout]

    @property
    def partials(self) -> int:
        """Partials shipped by the whole drain."""
        return sum(b.partials for b in self.batches)

    def summary(self) -> dict[str, Any]:
        """The figures the probe prints (steady batches: the first is left out of the spreads)."""
        steady = self.batches[1:] or self.batches
        return {
            "batches": len(self.batches),
            "partials": self.partials,
            "groups": sum(b.groups for b in self.batches),
            "spread_s_mean": round(float(np.mean([b.spread_ms for b in steady])) / 1000, 2),
            "partition_spread_s_mean": round(float(np.mean([b.partition_spread_ms for b in steady])) / 1000, 2),
            "behind": sum(b.behind for b in self.batches),
            "behind_s_max": max(b.behind_ms for b in self.batches) / 1000,
            "max_mean": round(float(np.mean([b.max_mean for b in steady])), 4),
            "max_mean_max": round(max(b.max_mean for b in steady), 4),
        }


def _group_codes(
    parts: dict[int, tuple[npt.NDArray[Any], npt.NDArray[np.int64]]], window_ms: int
) -> dict[int, npt.NDArray[np.int64]]:
    """Per partition, each record's (window, key) as one integer, the same integer in every partition."""
    if not parts:
        return {}
    order = list(parts)
    _, inverse = np.unique(np.concatenate([np.asarray(parts[p][0]) for p in order]), return_inverse=True)
    width = int(inverse.max(initial=0)) + 1
    codes, at = {}, 0
    for p in order:
        keys, times = parts[p]
        codes[p] = np.asarray(times // window_ms, np.int64) * width + inverse[at : at + len(keys)]
        at += len(keys)
    return codes


def simulate(parts: dict[int, tuple[npt.NDArray[Any], npt.NDArray[np.int64]]], budget: int, window_ms: int) -> Layout:
    """Drain ``parts`` (per partition: keys and event times in offset order) in micro-batches of ``budget``."""
    starts = {"t": {str(p): 0 for p in parts}}
    ends = {"t": {str(p): len(parts[p][0]) for p in parts}}
    codes = _group_codes(parts, window_ms)
    out: list[BatchLayout] = []
    reached: int | None = None
    while starts != ends:
        nxt = distribute_budget(starts, ends, budget)
        partials = records = 0
        lo, hi, widest, behind, behind_ms = None, None, 0, 0, 0
        sizes = [max(0, nxt["t"][str(p)] - starts["t"][str(p)]) for p in parts]
        taken: list[npt.NDArray[np.int64]] = []
        for p in parts:
            a, b = starts["t"][str(p)], nxt["t"][str(p)]
            if b <= a:
                continue
            t = parts[p][1][a:b]
            taken.append(np.unique(codes[p][a:b]))
            partials += int(taken[-1].size)
            records += b - a
            tmin, tmax = int(t.min()), int(t.max())
            lo = tmin if lo is None else min(lo, tmin)
            hi = tmax if hi is None else max(hi, tmax)
            widest = max(widest, tmax - tmin)
            if reached is not None:
                late = t < reached
                behind += int(late.sum())
                behind_ms = max(behind_ms, reached - tmin) if late.any() else behind_ms
        assert lo is not None and hi is not None
        groups = int(np.unique(np.concatenate(taken)).size)
        out.append(BatchLayout(records, partials, hi - lo, widest, behind, behind_ms, _max_mean(sizes), groups))
        reached = hi if reached is None else max(reached, hi)
        starts = nxt
    return Layout(out)


def _max_mean(sizes: list[int]) -> float:
    return float(max(sizes) / np.mean(sizes)) if sizes and sum(sizes) else 0.0


def simulate_live(
    parts: dict[int, tuple[npt.NDArray[Any], npt.NDArray[np.int64]]], trigger_ms: int, window_ms: int, n: int
) -> Layout:
    """Micro-batches of a live job: one per ``trigger_ms`` of event time, over the ``n`` partitions.

    Routers in step route each record as it arrives, so a trigger reads about one slide of event time. The first
    and the last (partial) triggers are left out.
    """
    t0 = min(int(t.min()) for _, t in parts.values())
    t1 = max(int(t.max()) for _, t in parts.values())
    out: list[BatchLayout] = []
    codes = _group_codes(parts, window_ms)
    for start in range(t0 + trigger_ms, t1 - trigger_ms + 1, trigger_ms):
        sizes, partials, taken = [], 0, [np.zeros(0, np.int64)]
        for p in range(n):
            if p not in parts:
                sizes.append(0)
                continue
            sel = (parts[p][1] >= start) & (parts[p][1] < start + trigger_ms)
            sizes.append(int(sel.sum()))
            taken.append(np.unique(codes[p][sel]))
            partials += int(taken[-1].size)
        groups = int(np.unique(np.concatenate(taken)).size)
        out.append(BatchLayout(sum(sizes), partials, trigger_ms, trigger_ms, 0, 0, _max_mean(sizes), groups))
    return Layout(out)


def read_layout(
    kafka: Any, topic: str, expected: int, routed: bool, dump: Path | None = None
) -> dict[int, tuple[npt.NDArray[Any], Any]]:
    """Keys and event times per partition of ``topic``, in offset order (routed records or raw JSON records).

    With ``dump``, also writes per partition the keys, the event times and (routed) the raw partition of each record
    there.
    """
    from benchmarks.topic_reader import read_topic
    from schemas.records import decode_routed_record

    rows: dict[int, list[tuple[int, str, int]]] = {}
    src: dict[int, list[tuple[int, int]]] = {}
    for r in read_topic(kafka, topic, expected=expected, idle_s=3.0):
        if routed:
            doc = decode_routed_record(r.value, r.key, topic, r.partition) or {}
            key, t = str(doc.get("k")), int(doc.get("t") or 0)
            src.setdefault(r.partition, []).append((r.offset, int(doc.get("p") or 0)))
        else:
            raw = orjson.loads(r.value or b"{}")
            key, t = str(raw["k"]), int(raw["t"])
        rows.setdefault(r.partition, []).append((r.offset, key, t))
    out: dict[int, tuple[npt.NDArray[Any], Any]] = {}
    for p, rs in rows.items():
        rs.sort()
        out[p] = (np.array([k for _, k, _ in rs]), np.array([t for _, _, t in rs], np.int64))
    if dump is not None:
        arrays = {f"t{p}": t for p, (_, t) in out.items()} | {f"k{p}": k for p, (k, _) in out.items()}
        arrays |= {f"p{p}": np.array([s for _, s in sorted(v)], np.int32) for p, v in src.items()}
        np.savez_compressed(dump, **arrays)
    return out


def _merge(doc: dict[str, Any], extra: dict[str, Any]) -> None:
    """``extra`` merged into ``doc``: dicts key by key, lists of dicts item by item (the routes), else replaced."""
    for k, v in extra.items():
        old = doc.get(k)
        if isinstance(v, dict) and isinstance(old, dict):
            _merge(old, v)
        elif isinstance(v, list) and isinstance(old, list) and all(isinstance(x, dict) for x in (*v, *old)):
            for mine, theirs in zip(old, v, strict=False):
                _merge(mine, theirs)
        else:
            doc[k] = v


def _one(config: str, n: int, args: argparse.Namespace, bootstrap: str, data: Any, procs: Any) -> dict[str, Any]:
    from benchmarks.e2e.feed import KeyedProducer, Routers
    from benchmarks.e2e.plan import E2EOptions, RunSpec
    from benchmarks.e2e.run import _drop_topics, _topics

    opts = replace(E2EOptions(), routers=args.routers, batch=args.batch, out=Path(args.out))
    prefix = f"layout-{time.strftime('%H%M%S')}"
    spec = RunSpec(config, n, "backlog", prefix, Path(args.out) / f"n{n}" / config, bootstrap, opts)
    settings = spec.settings()
    _topics(spec)  # writes the settings file again: the override goes after it
    if args.override:  # settings of the candidate measured (merged into the routed runs' settings file)
        import yaml

        doc = yaml.safe_load(spec.config_file.read_text(encoding="utf-8"))
        _merge(doc, json.loads(args.override))
        spec.config_file.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    routers = None
    t0 = time.monotonic()
    try:
        produce_s = None
        if args.route_after:  # a backlog already written when the routers start (a restart after downtime)
            KeyedProducer(settings.kafka, spec.raw_topic, data, 0.0).run_to_end()
            produce_s = time.monotonic() - t0
        if spec.routed:
            routers = Routers(spec, procs, args.routers)
            routers.start()
        if args.rate > 0:  # live: produced at the data's own pace (its event time advances as wall time does)
            producer = KeyedProducer(settings.kafka, spec.raw_topic, data, args.rate).start()
            while not producer.done:
                if producer.error is not None:
                    raise RuntimeError(f"producing failed: {producer.error}")
                time.sleep(0.2)
            produce_s = time.monotonic() - t0
        elif not args.route_after:  # routers first, as e2e-bench does: they route while the backlog is written
            KeyedProducer(settings.kafka, spec.raw_topic, data, 0.0).run_to_end()
            produce_s = time.monotonic() - t0
        route_s = cpu = routed = None
        if routers is not None:
            routers.wait(lambda v: sum(x["routed"] for x in v) >= len(data), 600, "routing the backlog")
            route_s = time.monotonic() - t0
            cpu = routers.cpu_seconds() - routers.cpu0
            time.sleep(1.0)
            routed = routers.routed()
        parts = read_layout(settings.kafka, spec.read_topic, len(data), spec.routed, spec.folder / "layout.npz")
    finally:
        if routers is not None:
            routers.stop()
    with contextlib.suppress(Exception):
        _drop_topics(spec)
    if args.rate > 0:  # live: a trigger per slide of event time
        res = simulate_live(parts, args.trigger_ms, args.window_s * 1000, n).summary()
    else:
        res = simulate(parts, args.batch, args.window_s * 1000).summary()
    t0_ms = min(int(t.min()) for _, t in parts.values())
    deciles = {p: [round((int(t[int(q * (len(t) - 1))]) - t0_ms) / 1000, 1) for q in np.linspace(0, 1, 11)]
               for p, (_, t) in sorted(parts.items())}  # fmt: skip
    return {
        "config": config,
        "n": n,
        "produce_s": produce_s,
        "route_s": route_s,
        "router_cpu_s": cpu,
        "routed": routed,
        **res,
        "deciles_s": deciles,
    }


def main(argv: list[str] | None = None) -> int:
    """Route a backlog per configuration and print its simulated drain (JSON lines)."""
    from benchmarks.demo.processes import Processes
    from benchmarks.demo.source import build_input
    from connectors.broker import EmbeddedBroker, free_port

    ap = argparse.ArgumentParser(prog="python -m benchmarks.e2e.layout", description=__doc__.splitlines()[0])
    ap.add_argument("--combiners", "-n", default="2")
    ap.add_argument("--configs", default="direct,hash")
    ap.add_argument("--routers", type=int, default=1)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--window-s", type=int, default=10)
    ap.add_argument("--workload", default="zipf:s=1.5,keys=10000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--override", default="", help="settings merged into the routed runs' file (JSON)")
    ap.add_argument("--route-after", action="store_true", help="start the routers once the backlog is written")
    ap.add_argument("--rate", type=float, default=0.0, help="produce live at this many records/s (0: a backlog)")
    ap.add_argument("--trigger-ms", type=int, default=1000, help="live: the job's trigger, in event time")
    ap.add_argument("--out", default="reports/layout")
    args = ap.parse_args(argv)
    data = build_input(args.workload, args.records, args.rate, args.seed)
    server = None
    if args.bootstrap is None:
        server = EmbeddedBroker(free_port(), state_dir=Path(args.out) / "broker").start()
    bootstrap = args.bootstrap or server.bootstrap  # type: ignore[union-attr]
    try:
        with Processes() as procs:
            for n in (int(x) for x in args.combiners.split(",")):
                for config in (c.strip() for c in args.configs.split(",") if c.strip()):
                    print(json.dumps(_one(config, n, args, bootstrap, data, procs)), flush=True)
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
