"""The tables and JSON figures of ``skewroute router-bench`` (:mod:`benchmarks.router_bench`).

The separate section: per configuration, medians over rounds and ratios to the adjacent pass-through run. The
release section: this code's variants (routed format, ``router.max_in_flight``) and the baseline release side by
side, with the figures ``router-throughput.json`` holds per configuration.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

__all__ = ["BASELINE", "NEW", "SEPARATE", "Variant", "figures", "label", "release_table", "separate_table",
           "release_variants"]  # fmt: skip

NEW, BASELINE = "new", "baseline"
#: A variant of the release section: (release, routed format, router.max_in_flight or None for the default).
Variant = tuple[str, int, int | None]

SEPARATE = (
    "Every configuration runs right before or after a pass-through process of its own (order alternating); "
    "its ratio is the median over rounds of rate / that adjacent pass-through rate. End-to-end rate = records / "
    "(time the last routed record of the topic was acknowledged and its offsets committed - time the first "
    "record was consumed); the group join before the first record is excluded. µs/tuple columns are wall time "
    "per record in each phase of the batch loop (assign includes window metrics; the partitioner's own share in "
    "parentheses). Tuples per CPU-second = records / CPU time of the worker process (all its threads, "
    "librdkafka's included) over the same span."
)


def release_variants(args: argparse.Namespace) -> list[Variant]:
    """The variants of the release section: this code per format and max_in_flight, then the baseline's."""
    flights: list[int | None] = [int(k) for k in args.in_flight.split(",")] if args.in_flight else [None]
    out: list[Variant] = [(NEW, int(f), k) for f in args.formats.split(",") for k in flights]
    return out + ([(BASELINE, 1, None)] if args.baseline is not None else [])


def label(variant: Variant) -> str:
    release, fmt, k = variant
    if release == BASELINE:  # run with its own settings: format 1 for releases before format 2, else format 2
        return f"{release} (its default format)"
    return f"{release} (format {fmt}{'' if k is None else f', in flight {k}'})"


def figures(runs: list[dict[str, Any]], raw_bytes: float, v1_bytes: float) -> dict[str, Any]:
    """The JSON figures of one configuration: medians over its successful runs."""
    good = [r for r in runs if r.get("ok")]
    if not good:
        return {"ok": False, "error": str(next((r.get("error") for r in runs), "not run"))[-300:]}

    def med(values: list[float]) -> float:
        finite = [v for v in values if v == v]  # NaN: not measured
        return statistics.median(finite) if finite else float("nan")

    routed = med([r.get("routed_bytes_per_record", float("nan")) for r in good])
    return {
        "ok": True,
        "runs": len(good),
        "tuples_per_s": med([r["rate"] for r in good]),
        "tuples_per_s_best": max(r["rate"] for r in good),
        "cpu_us_per_record": med([1e6 * r["cpu_s"] / r["consumed"] for r in good]),
        "broker_cpu_us_per_record": med([1e6 * r.get("broker_cpu_s", float("nan")) / r["consumed"] for r in good]),
        "routed_bytes_per_record": routed if routed == routed else v1_bytes,
        "routed_bytes_measured": routed == routed,
        "raw_bytes_per_record": raw_bytes,
    }


def release_table(
    args: argparse.Namespace, per: dict[str, dict[tuple[str, Variant], list[dict[str, Any]]]],
    sizes: dict[str, tuple[float, float]], names: list[str],
) -> tuple[list[str], list[dict[str, Any]]]:  # fmt: skip
    """The markdown section comparing releases/formats side by side, and the JSON entries.

    With several ``max_in_flight`` values, one more column per later value: its tuples/s and CPU µs/record over
    those of the first value (same format).
    """
    variants = release_variants(args)
    first = variants[0]
    later = [v for v in variants if v[0] == NEW and v[2] is not None and v != first and v[1] == first[1]]
    entries: list[dict[str, Any]] = []
    out = [
        f"## This release against {args.baseline or 'no baseline'} ({args.rounds} rounds, adjacent runs)",
        "",
        "One worker process per run (a fresh consumer group and combiner topic each), variants of one "
        "configuration run one after the other (order rotated per round); medians over rounds. CPU µs/record = "
        "CPU time of the worker process (all threads, librdkafka's included) from the first record consumed to "
        "the last batch committed, per record; broker CPU µs/record = CPU time of the broker process over the whole "
        "child run (group join and reading the routed topic back included), per record. Routed bytes = Kafka key + "
        "value per routed record, read back from the combiner topic (the baseline's drops its topic: computed with "
        "the format-1 encoder on the same records, marked *); raw bytes = key + value of the raw records.",
        "",
    ]
    for wl, runs_by in per.items():
        raw_bytes, v1_bytes = sizes[wl]
        head = "| configuration | " + " | ".join(
            f"{label(v)}: tuples/s | CPU µs/rec | broker CPU µs/rec | routed B/rec" for v in variants
        )
        ratio = args.baseline is not None
        head += "".join(f" | {label(v)} / {label(first)}: tuples/s, CPU µs/rec" for v in later)
        head += " | tuples/s new (format 2) / baseline |" if ratio else " |"
        rule = "| --- |" + " ---: | ---: | ---: | ---: |" * len(variants) + " ---: |" * (len(later) + ratio)
        out += [f"### {wl} (raw {raw_bytes:.1f} B/record)", "", head, rule]
        for name in names:
            cells = []
            figs = {}
            for v in variants:
                f = figures(runs_by.get((name, v), []), raw_bytes, v1_bytes)
                figs[v] = f
                entries.append({"workload": wl, "configuration": name, "release": v[0],
                                "routed_format": None if v[0] == BASELINE else v[1],
                                "max_in_flight": v[2], **f})  # fmt: skip
                if not f["ok"]:
                    cells.append("failed | | |")
                    continue
                star = "" if f["routed_bytes_measured"] else "*"
                cells.append(
                    f"{f['tuples_per_s']:,.0f} | {f['cpu_us_per_record']:.2f} | "
                    f"{f['broker_cpu_us_per_record']:.2f} | {f['routed_bytes_per_record']:.1f}{star}"
                )
            row = f"| {name} | " + " | ".join(cells) + " |"
            for v in later:
                a, b = figs[v], figs[first]
                if a["ok"] and b["ok"] and b["tuples_per_s"] > 0 and b["cpu_us_per_record"] > 0:
                    rate, cpu = (a[k] / b[k] for k in ("tuples_per_s", "cpu_us_per_record"))
                    row += f" {rate:.2f}, {cpu:.2f} |"
                else:
                    row += " |"
            if ratio:
                news = [v for v in variants if v[0] == NEW and v[1] == 2] or variants[:1]
                new, old = figs[news[0]], figs[(BASELINE, 1, None)]
                ok = new["ok"] and old["ok"] and old["tuples_per_s"] > 0
                row += f" {new['tuples_per_s'] / old['tuples_per_s']:.2f} |" if ok else " |"
            out.append(row)
        out.append("")
    return out, entries


def separate_table(results: dict[str, dict[str, list[dict[str, Any]]]], names: list[str]) -> list[str]:
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
