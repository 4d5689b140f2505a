"""Router throughput benchmark: end-to-end tuples/s of a worker per partitioner, next to a pass-through route.

``skewroute router-bench``: preloads one raw topic per workload (Zipf 1.5
over 10k keys, uniform over 10k keys; small JSON values). Configurations: ``passthrough`` (combiner =
(source partition + offset) mod n: the same consume/extract/encode/produce/commit work, spread evenly over all
``n`` combiner partitions like a balancing partitioner, with no key work) and every name in
``router.partitioners.available()``. Two sections (``--mode``):

* pairs: per configuration, one process runs a pass-through route and the configuration's route turn by turn,
  batch by batch (:mod:`benchmarks.router_bench_pair`); the ratio of the two rates does not move with the host's slow
  spells, which hit both routes alike.
* separate: one worker process per configuration (a fresh consumer group and combiner topic each) routes the
  whole topic; the time runs from the first record consumed to the last routed record acknowledged. Each
  configuration runs right next to a pass-through process of its own (order alternating); the ratio is the
  median over rounds of rate / that adjacent pass-through rate.

The ``release`` section runs each configuration per routed format and, with ``--in-flight``
(e.g. ``1,2,4``), per ``router.max_in_flight`` (passed to the workers as ``$SKEWROUTE_ROUTER__MAX_IN_FLIGHT``).

Rounds rotate the configuration order. The report ends with the broker-less per-phase CPU profile
(:mod:`benchmarks.router_bench_hotpath`); the workloads are :mod:`benchmarks.router_bench_workloads`. Writes
``router-throughput.md`` in the report folder (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.planes import PASSTHROUGH
from benchmarks.router_bench_hotpath import hotpath_table
from benchmarks.router_bench_pair import SLIDE, pair_table, window
from benchmarks.router_bench_report import (
    BASELINE,
    NEW,
    SEPARATE,
    Variant,
    figures,
    label,
    release_table,
    release_variants,
    separate_table,
)
from benchmarks.router_bench_workloads import ALL_WORKLOADS, KEYS, RAW_PARTITIONS, WORKLOADS, key_source, preload

__all__ = ["main"]


def _child(args: argparse.Namespace) -> None:
    """One worker process: route the whole raw topic once (or a pair, turn by turn), print the stats as JSON."""
    from benchmarks.router_bench_pair import drop_combiner_topic, make_plane, run_pair, topic_bytes
    from router.plane_parts import tune_gc

    if args.pair:
        pair = run_pair(args.bootstrap, args.raw, args.partitioner, n=args.n, batch=args.batch,
                        combiners=args.combiners, producer_conf=args.producer_conf, timeout=args.timeout,
                        key_source=args.key_source, slide=args.slide)  # fmt: skip
        print(json.dumps(pair))
        return
    plane = make_plane(args.bootstrap, args.raw, args.partitioner, n=args.n, batch=args.batch,
                       combiners=args.combiners, producer_conf=args.producer_conf,
                       routed_format=args.routed_format, key_source=args.key_source, slide=args.slide)  # fmt: skip
    tune_gc()  # as the worker does once its data planes are built (router.app)
    plane.start()
    plane.join(args.timeout)
    st = plane.stats
    ok = plane.error is None and st.consumed >= args.n and st.first_consumed is not None and st.last_acked is not None
    elapsed = (st.last_acked - st.first_consumed) if ok else float("nan")  # type: ignore[operator]
    if plane.alive:
        plane.stop()
        plane.join(30)
    routed_bytes = topic_bytes(plane.kafka, plane.route.combiner_topic_name, st.routed) if ok else float("nan")
    drop_combiner_topic(plane)
    print(
        json.dumps(
            {
                "ok": ok,
                "error": repr(plane.error) if plane.error else None,
                "consumed": st.consumed,
                "routed": st.routed,
                "elapsed": elapsed,
                "rate": st.consumed / elapsed if ok and elapsed > 0 else 0.0,
                "cpu_s": (st.last_cpu - st.first_cpu) if ok else float("nan"),  # type: ignore[operator]
                "routed_bytes_per_record": routed_bytes,
                "phases_us": {
                    k: 1e6 * getattr(st, f"{k}_s") / max(st.consumed, 1)
                    for k in ("extract", "assign", "partitioner", "produce", "deliver")
                },
            }
        )
    )


def _run_child(
    args: argparse.Namespace, raw: str, name: str, *, pair: bool = False, release: str = NEW, fmt: int = 2,
    in_flight: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One worker process; ``release`` ``baseline`` runs the code of ``args.baseline`` (its own child protocol).

    ``in_flight`` sets the worker's ``router.max_in_flight`` (through the environment, as any router setting).
    """
    cmd = [
        sys.executable, "-m", "benchmarks.router_bench", "--child", "--bootstrap", args.bootstrap, "--raw", raw,
        "--partitioner", name, "-n", str(args.n), "--batch", str(args.batch), "--combiners", str(args.combiners),
        "--timeout", str(args.timeout), "--producer-conf", args.producer_conf, *(["--pair"] if pair else []),
        *(["--key-source", args.key_source] if args.key_source != "field" else []),  # a baseline's child must know it
        *(["--slide", str(args.slide)] if args.slide != SLIDE else []),  # as must this
    ]  # fmt: skip
    env: dict[str, str] | None = None
    cwd = None
    if in_flight is not None:
        env = {**os.environ, "SKEWROUTE_ROUTER__MAX_IN_FLIGHT": str(in_flight)}
    if release == BASELINE:
        env, cwd = {**(env or os.environ), "PYTHONPATH": str(args.baseline)}, str(args.baseline)
    else:
        cmd += ["--routed-format", str(fmt)]
    cpu0 = _broker_cpu(args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 60, env=env, cwd=cwd)
    broker_s = _broker_cpu(args) - cpu0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"ok": False, "error": (proc.stderr or proc.stdout)[-400:], "rate": 0.0}
    out: dict[str, Any] = json.loads(lines[-1])
    out["broker_cpu_s"] = broker_s  # the broker's CPU over the whole child (join, routing, reading back)
    return out


def _broker_cpu(args: argparse.Namespace) -> float:
    """CPU seconds (all threads) the broker process we started has used so far; NaN for a given broker."""
    pid = getattr(getattr(args, "broker", None), "proc", None)
    if pid is None:
        return float("nan")
    try:
        fields = Path(f"/proc/{pid.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _pair_rounds(args: argparse.Namespace, raw: str, names: list[str], per: dict[str, list[dict[str, Any]]]) -> None:
    """Every configuration against pass-through in one process, turn by turn (:mod:`benchmarks.router_bench_pair`)."""
    for rnd in range(args.rounds):
        for name in names[rnd % len(names) :] + names[: rnd % len(names)]:  # rotated
            r = _run_child(args, raw, name, pair=True)
            per.setdefault(name, []).append(r)
            if name in r and r[name].get("ok") and r[PASSTHROUGH].get("ok"):
                x, base = r[name]["rate"], r[PASSTHROUGH]["rate"]
                shown = f"{x:,.0f} tuples/s, pass-through {base:,.0f} in the same process: {x / base:.3f}x"
            else:
                shown = f"FAILED {str(r.get('error'))[-200:]}"
            print(f"  pair round {rnd + 1} {name:<12} {shown}", flush=True)


def _separate_rounds(
    args: argparse.Namespace, raw: str, names: list[str], per: dict[str, list[dict[str, Any]]]
) -> None:
    """One worker process per configuration, each next to a pass-through process of its own."""
    for rnd in range(args.rounds):
        for i, name in enumerate(names[rnd % len(names) :] + names[: rnd % len(names)]):  # rotated
            pair = [name] if name == PASSTHROUGH else [PASSTHROUGH, name][:: 1 if (rnd + i) % 2 else -1]
            runs = {n: _run_child(args, raw, n) for n in pair}  # adjacent: the same spell of noise
            for n, r in runs.items():
                if n != PASSTHROUGH:
                    r["base"] = runs[PASSTHROUGH]
                per.setdefault(n, []).append(r)
            r = runs[name]
            shown = f"{r['rate']:,.0f} tuples/s" if r.get("ok") else f"FAILED {str(r.get('error'))[-200:]}"
            base = runs[PASSTHROUGH]
            if name != PASSTHROUGH and r.get("ok") and base.get("ok") and base["rate"] > 0:
                shown += f" (adjacent pass-through {base['rate']:,.0f}: {r['rate'] / base['rate']:.2f}x)"
            print(f"  round {rnd + 1} {name:<12} {shown}", flush=True)


def _release_rounds(
    args: argparse.Namespace, raw: str, names: list[str], per: dict[tuple[str, Variant], list[dict[str, Any]]]
) -> None:
    """Every configuration with this code (each variant) and with the baseline release, adjacent runs."""
    variants = release_variants(args)
    for rnd in range(args.rounds):
        for name in names[rnd % len(names) :] + names[: rnd % len(names)]:  # rotated
            order = variants[rnd % len(variants) :] + variants[: rnd % len(variants)]
            for v in order:
                r = _run_child(args, raw, name, release=v[0], fmt=v[1], in_flight=v[2])
                per.setdefault((name, v), []).append(r)
                shown = f"{r['rate']:,.0f} tuples/s" if r.get("ok") else f"FAILED {str(r.get('error'))[-200:]}"
                print(f"  release round {rnd + 1} {name:<12} {label(v):<36} {shown}", flush=True)


def _sizes(bootstrap: str, raw: str) -> tuple[float, float]:
    """Raw key + value bytes per record of ``raw``, and what format 1 makes of them (key + JSON envelope)."""
    import orjson

    from benchmarks.topic_reader import read_topic
    from schemas.records import encode_routed
    from schemas.settings import KafkaSettings

    recs = read_topic(KafkaSettings(bootstrap_servers=bootstrap), raw, idle_s=2.0)
    raw_b = sum(len(r.key or b"") + len(r.value or b"") for r in recs) / max(len(recs), 1)
    v1 = 0
    for r in recs:
        k = str(orjson.loads(r.value or b"{}")["key"])
        v1 += len(k.encode()) + len(encode_routed(k, r.timestamp, 0, raw, r.partition, r.offset, None, r.value or b""))
    return raw_b, v1 / max(len(recs), 1)


def _child_main(argv: list[str]) -> None:
    """The internal protocol of one worker process (``--child``): route, print the stats as JSON."""
    ap = argparse.ArgumentParser(prog="router-bench --child")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--pair", action="store_true")
    ap.add_argument("--raw", required=True)
    ap.add_argument("--partitioner", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("-n", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--combiners", type=int, required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--producer-conf", default="{}")
    ap.add_argument("--routed-format", type=int, default=2)
    ap.add_argument("--key-source", default="field")
    ap.add_argument("--slide", type=int, default=SLIDE)
    _child(ap.parse_args(argv))


def main(
    records: int = 300_000,
    rounds: int = 3,
    batch: int = 20_000,
    combiners: int = 8,
    bootstrap: str | None = None,
    partitioners: str | None = None,
    workloads: str = ",".join(WORKLOADS),
    timeout: float = 300.0,
    producer_conf: str = "{}",
    out: Path = Path("reports"),
    hotpath: bool = False,
    mode: str = "both",
    brokers: str = "tansu",
    formats: str = "2",
    baseline: Path | None = None,
    in_flight: str = "",
    slide: int = SLIDE,
) -> None:
    """Run the benchmark; write ``OUT/router-throughput.md`` and ``OUT/router-throughput.json``.

    ``skewroute router-bench`` is the command line. ``formats``: routed wire formats this code is run with;
    ``baseline``: the source tree of an earlier release, run side by side in the ``release`` section.
    """
    unknown = [w for w in workloads.split(",") if w not in ALL_WORKLOADS]
    if unknown:
        raise ValueError(f"workloads must be among {', '.join(ALL_WORKLOADS)}, got {', '.join(unknown)}")
    args = argparse.Namespace(
        n=records, rounds=rounds, batch=batch, combiners=combiners, bootstrap=bootstrap, only=partitioners,
        workloads=workloads, timeout=timeout, producer_conf=producer_conf, report=out / "router-throughput.md",
        hotpath=hotpath, mode=mode, brokers=brokers, formats=formats, baseline=baseline,
        in_flight=in_flight, slide=slide, key_source="field",
    )  # fmt: skip
    from router.partitioners import available

    names = args.only.split(",") if args.only else ["passthrough", *available()]
    if args.hotpath:
        hotpath_table(args.n, names, args.batch, args.combiners, args.slide)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: stop our broker
    kinds = ["given"] if args.bootstrap is not None else args.brokers.split(",")
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    pairs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    releases: dict[str, dict[tuple[str, Variant], list[dict[str, Any]]]] = {}
    sizes: dict[str, tuple[float, float]] = {}
    for kind in kinds:
        broker = _start_broker(kind) if kind != "given" else None
        args.broker = broker
        if broker is not None:
            args.bootstrap = broker.bootstrap
        try:
            for wl in args.workloads.split(","):
                args.key_source = key_source(wl)  # the workload's routes (children follow args)
                raw = f"bench-{wl}-{time.time_ns()}"
                label = wl if len(kinds) == 1 else f"{wl} on {kind}"
                t0 = time.monotonic()
                preload(args.bootstrap, raw, args.n, wl, seed=1)
                print(f"{label}: preloaded {args.n:,} records in {time.monotonic() - t0:.1f} s", flush=True)
                if args.mode in ("pairs", "both"):
                    _pair_rounds(args, raw, [x for x in names if x != PASSTHROUGH], pairs.setdefault(label, {}))
                if args.mode in ("separate", "both"):
                    _separate_rounds(args, raw, names, results.setdefault(label, {}))
                if args.mode == "release":
                    _release_rounds(args, raw, names, releases.setdefault(label, {}))
                sizes[label] = _sizes(args.bootstrap, raw)
        finally:
            if broker is not None:
                broker.stop()
    load1 = os.getloadavg()
    lines = pair_table(pairs, args.rounds)
    release_lines, entries = release_table(args, releases, sizes, names) if releases else ([], [])
    lines += release_lines
    fmt0 = int(args.formats.split(",")[0])
    for wl, per in results.items():
        for name in names:
            f = figures(per.get(name, []), *sizes[wl])
            entries.append({"workload": wl, "configuration": name, "release": NEW, "routed_format": fmt0,
                            "max_in_flight": None, **f})  # fmt: skip
    if results:
        lines += [
            f"## One worker process per configuration ({args.rounds} rounds)",
            "",
            SEPARATE,
            "",
            *separate_table(results, names),
        ]
    print("\n".join(lines))
    hot_n = min(args.n, 200_000)
    print(f"hot path without a broker ({hot_n:,} records per configuration):", flush=True)
    lines += [
        f"### Hot path without a broker (thread CPU µs per tuple, best of 3, {hot_n:,} in-memory Kafka messages)",
        "",
        "The worker's own code for a batch, per routed format: extract, assign (partitioner, window clock and "
        "window metrics), produce (encode + `produce()` into librdkafka's queue). The end-to-end figures above add "
        "librdkafka's own threads (fetch, batching, sending), flush/commit, and the broker.",
        "",
        *hotpath_table(hot_n, names, args.batch, args.combiners, args.slide),
        "",
    ]
    header = [
        "# Router throughput",
        "",
        f"Generated by `skewroute router-bench` on {started}: {args.n:,} records per workload "
        f'({RAW_PARTITIONS} raw partitions, values like `{{"key":"k42","v":7}}`, '
        f'`{{"key":"k42","t":1700000000007,"v":7}}` for the `-fields` workloads, '
        f'`{{"key":"k42","t":1700000000007,"v":0.07}}` for `-prices`, {KEYS:,} keys), '
        f"{args.combiners} combiners, batches of {args.batch:,}, count window "
        f"{window(args.slide)['size']}/{args.slide}, at-least-once delivery, "
        f"{args.rounds} rounds per section (configuration order rotated each round). Machine: {os.cpu_count()} "
        f"CPUs, {platform.python_implementation()} {platform.python_version()}, broker = {', '.join(kinds)} on the "
        "same machine (tansu = embedded Tansu, kafka = Apache Kafka, one KRaft node); "
        f"1-min load average {load0[0]:.2f} at the start and {load1[0]:.2f} after the end-to-end "
        "runs (anything above ~2 means other processes competed for the 2 cores).",
        "",
    ]
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(header + lines) + "\n")
    summary = {
        "generated": started, "records": args.n, "combiners": args.combiners, "batch": args.batch,
        "rounds": args.rounds, "brokers": kinds, "cpus": os.cpu_count(), "load_average_start": load0[0],
        "load_average_end": load1[0], "baseline": str(args.baseline) if args.baseline else None,
        "configurations": entries,
    }  # fmt: skip
    json_path = args.report.with_suffix(".json")
    json_path.write_text(json.dumps(_no_nan(summary), indent=1, allow_nan=False, default=str) + "\n")
    print(f"wrote {args.report} and {json_path}")


def _no_nan(doc: Any) -> Any:
    """``doc`` with NaN floats (not measured) as ``None`` (JSON null)."""
    if isinstance(doc, dict):
        return {k: _no_nan(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_no_nan(v) for v in doc]
    return None if isinstance(doc, float) and doc != doc else doc


def _start_broker(kind: str) -> Any:
    """Start the embedded Tansu or a one-node Apache Kafka on a free port (stopped by the caller)."""
    from connectors.broker import EmbeddedBroker, free_port

    state = Path(tempfile.mkdtemp(prefix="router-bench-"))
    if kind == "tansu":
        return EmbeddedBroker(free_port(), state_dir=state).start()
    if kind == "kafka":
        from connectors.apache_kafka import ApacheKafkaCluster

        return ApacheKafkaCluster(port=free_port(), state_dir=state, heap="1g").start()
    raise SystemExit(f"--brokers: unknown broker {kind!r} (tansu, kafka)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child_main(sys.argv[1:])
    else:
        from router.cli import app

        app(["router-bench", *sys.argv[1:]])
