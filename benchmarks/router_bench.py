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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.planes import PASSTHROUGH
from benchmarks.router_bench_hotpath import hotpath_table
from benchmarks.router_bench_pair import pair_table
from benchmarks.router_bench_workloads import KEYS, RAW_PARTITIONS, WORKLOADS, preload

__all__ = ["main"]

SEPARATE = (
    "Every configuration runs right before or after a pass-through process of its own (order alternating); "
    "its ratio is the median over rounds of rate / that adjacent pass-through rate. End-to-end rate = records / "
    "(time the last routed record of the topic was acknowledged and its offsets committed - time the first "
    "record was consumed); the group join before the first record is excluded. µs/tuple columns are wall time "
    "per record in each phase of the batch loop (assign includes window metrics; the partitioner's own share in "
    "parentheses). Tuples per CPU-second = records / CPU time of the worker process (all its threads, "
    "librdkafka's included) over the same span."
)


def _child(args: argparse.Namespace) -> None:
    """One worker process: route the whole raw topic once (or a pair, turn by turn), print the stats as JSON."""
    from benchmarks.router_bench_pair import drop_combiner_topic, make_plane, run_pair

    if args.pair:
        pair = run_pair(args.bootstrap, args.raw, args.partitioner, n=args.n, batch=args.batch,
                        combiners=args.combiners, producer_conf=args.producer_conf, timeout=args.timeout)  # fmt: skip
        print(json.dumps(pair))
        return
    plane = make_plane(args.bootstrap, args.raw, args.partitioner, n=args.n, batch=args.batch,
                       combiners=args.combiners, producer_conf=args.producer_conf).start()  # fmt: skip
    plane.join(args.timeout)
    st = plane.stats
    ok = plane.error is None and st.consumed >= args.n and st.first_consumed is not None and st.last_acked is not None
    elapsed = (st.last_acked - st.first_consumed) if ok else float("nan")  # type: ignore[operator]
    if plane.alive:
        plane.stop()
        plane.join(30)
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
                "phases_us": {
                    k: 1e6 * getattr(st, f"{k}_s") / max(st.consumed, 1)
                    for k in ("extract", "assign", "partitioner", "produce", "deliver")
                },
            }
        )
    )


def _run_child(args: argparse.Namespace, raw: str, name: str, *, pair: bool = False) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "benchmarks.router_bench", "--child", "--bootstrap", args.bootstrap, "--raw", raw,
        "--partitioner", name, "-n", str(args.n), "--batch", str(args.batch), "--combiners", str(args.combiners),
        "--timeout", str(args.timeout), "--producer-conf", args.producer_conf, *(["--pair"] if pair else []),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 60)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"ok": False, "error": (proc.stderr or proc.stdout)[-400:], "rate": 0.0}
    return json.loads(lines[-1])


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


def _table(results: dict[str, dict[str, list[dict[str, Any]]]], names: list[str]) -> list[str]:
    out = []
    for wl, per in results.items():

        def med(name: str, key: str, per: dict[str, list[dict[str, Any]]] = per) -> float:
            runs = [r for r in per.get(name, []) if r.get("ok")]
            return statistics.median(r[key] for r in runs) if runs else 0.0

        for r in (r for rs in per.values() for r in rs if r.get("ok")):
            r["cpu_rate"] = r["consumed"] / r["cpu_s"] if r["cpu_s"] > 0 else 0.0

        def paired(name: str, key: str, per: dict[str, list[dict[str, Any]]] = per) -> float:
            """Median over rounds of the rate / the rate of the pass-through run next to it."""
            if name == "passthrough":
                return 1.0
            pairs = [(r, r.get("base", {})) for r in per.get(name, [])]
            ratios = [r[key] / b[key] for r, b in pairs if r.get("ok") and b.get("ok") and b[key] > 0]
            return statistics.median(ratios) if ratios else float("nan")

        out += [
            f"### {wl}",
            "",
            "| configuration | tuples/s (median) | best | vs pass-through (paired) | tuples per CPU-second |"
            " vs pass-through (paired) |"
            " µs/tuple: extract | assign (partitioner) | produce | deliver+commit |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name in names:
            runs = [r for r in per.get(name, []) if r.get("ok")]
            if not runs:
                err = next((r.get("error") for r in per.get(name, [])), "not run")
                out.append(f"| {name} | failed | {str(err).splitlines()[-1][:80] if err else ''} |" + " |" * 8)
                continue
            rate, cpu = med(name, "rate"), med(name, "cpu_rate")
            ph = {k: statistics.median(r["phases_us"][k] for r in runs) for k in runs[0]["phases_us"]}
            out.append(
                f"| {name} | {rate:,.0f} | {max(r['rate'] for r in runs):,.0f} | "
                f"{paired(name, 'rate'):.2f} | {cpu:,.0f} | "
                f"{paired(name, 'cpu_rate'):.2f} | {ph['extract']:.2f} | "
                f"{ph['assign']:.2f} ({ph['partitioner']:.2f}) | {ph['produce']:.2f} | {ph['deliver']:.2f} |"
            )
        out.append("")
    return out


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
) -> None:
    """Run the benchmark and write ``OUT/router-throughput.md`` (``skewroute router-bench`` is the command line)."""
    unknown = [w for w in workloads.split(",") if w not in WORKLOADS]
    if unknown:
        raise ValueError(f"workloads must be among {', '.join(WORKLOADS)}, got {', '.join(unknown)}")
    args = argparse.Namespace(
        n=records, rounds=rounds, batch=batch, combiners=combiners, bootstrap=bootstrap, only=partitioners,
        workloads=workloads, timeout=timeout, producer_conf=producer_conf, report=out / "router-throughput.md",
        hotpath=hotpath, mode=mode, brokers=brokers,
    )  # fmt: skip
    from router.partitioners import available

    names = args.only.split(",") if args.only else ["passthrough", *available()]
    if args.hotpath:
        hotpath_table(args.n, names, args.batch, args.combiners)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: stop our broker
    kinds = ["given"] if args.bootstrap is not None else args.brokers.split(",")
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    pairs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for kind in kinds:
        broker = _start_broker(kind) if kind != "given" else None
        if broker is not None:
            args.bootstrap = broker.bootstrap
        try:
            for wl in args.workloads.split(","):
                raw = f"bench-{wl}-{time.time_ns()}"
                label = wl if len(kinds) == 1 else f"{wl} on {kind}"
                t0 = time.monotonic()
                preload(args.bootstrap, raw, args.n, WORKLOADS[wl], seed=1)
                print(f"{label}: preloaded {args.n:,} records in {time.monotonic() - t0:.1f} s", flush=True)
                if args.mode in ("pairs", "both"):
                    _pair_rounds(args, raw, [x for x in names if x != PASSTHROUGH], pairs.setdefault(label, {}))
                if args.mode in ("separate", "both"):
                    _separate_rounds(args, raw, names, results.setdefault(label, {}))
        finally:
            if broker is not None:
                broker.stop()
    load1 = os.getloadavg()
    lines = pair_table(pairs, args.rounds)
    if results:
        lines += [
            f"## One worker process per configuration ({args.rounds} rounds)",
            "",
            SEPARATE,
            "",
            *_table(results, names),
        ]
    print("\n".join(lines))
    hot_n = min(args.n, 200_000)
    print(f"hot path without a broker ({hot_n:,} records per configuration):", flush=True)
    lines += [
        f"### Hot path without a broker (thread CPU µs per tuple, best of 3, {hot_n:,} in-memory Kafka messages)",
        "",
        "The Python side of the batch loop alone: `Extractor.extract`, `assign` (the partitioner, or the source "
        "partition for pass-through), `encode_routed` + `produce()` into librdkafka's queue. The end-to-end "
        "figures above add librdkafka's own threads (fetch, batching, sending), flush/commit, and the broker.",
        "",
        *hotpath_table(hot_n, names, args.batch, args.combiners),
        "",
    ]
    header = [
        "# Router throughput",
        "",
        f"Generated by `skewroute router-bench` on {started}: {args.n:,} records per workload "
        f'({RAW_PARTITIONS} raw partitions, values like `{{"key":"k42","v":7}}`, {KEYS:,} keys), '
        f"{args.combiners} combiners, batches of {args.batch:,}, count window 60000/1000, at-least-once delivery, "
        f"{args.rounds} rounds per section (configuration order rotated each round). Machine: {os.cpu_count()} "
        f"CPUs, {platform.python_implementation()} {platform.python_version()}, broker = {', '.join(kinds)} on the "
        "same machine (tansu = embedded Tansu, kafka = Apache Kafka, one KRaft node); "
        f"1-min load average {load0[0]:.2f} at the start and {load1[0]:.2f} after the end-to-end "
        "runs (anything above ~2 means other processes competed for the 2 cores).",
        "",
    ]
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(header + lines) + "\n")
    print(f"wrote {args.report}")


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
