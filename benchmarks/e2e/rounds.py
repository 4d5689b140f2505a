"""Repeated rounds of the backlog drain, in alternating order: drain ratios against direct, paired per round.

One pass of each configuration leaves every ratio against direct exposed to the session's drift: the Spark
session keeps getting faster for a while (JIT, Python workers, cached consumers), so whichever configuration runs
later looks faster. Measured at n = 2 (2026-11-27): direct's second pass drained 17-19 % faster than its first,
and the hash-routed drain was 1.11-1.13x direct's first pass but 0.94-0.95x its second. ``--rounds R`` drains
every configuration again, R times in all, the order reversed every other round (round 1 as given, round 2
reversed, ...), so drift favours each side in half of the rounds. Each round's ratio divides a configuration's
drain by direct's drain *of the same round*; the report gives, per configuration, the median of those paired
ratios and their range. A target is met on the median; the range says whether the rounds agree.

Round 1 is the run's ordinary backlog phase (its full documents stay in ``runs``); rounds 2..R keep a summary per
drain in ``rounds``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

NOT_EXACT = " \\*"

__all__ = ["goals", "lines", "order", "paired", "partials", "run_rounds", "summary"]


def order(configs: Sequence[str], round_: int) -> list[str]:
    """The configurations in the order of round ``round_`` (1-based): as given when odd, reversed when even."""
    return list(configs) if round_ % 2 else list(reversed(configs))


def summary(run: dict[str, Any], round_: int) -> dict[str, Any]:
    """What a round keeps of one drain's document."""
    out = {"n": run["n"], "config": run["config"], "round": round_}
    if "error" in run:
        return out | {"error": run["error"]}
    spark = run["spark"]
    return out | {
        "steady_rate": spark["steady_rate"],
        "partials": spark.get("shuffled_partials"),
        "groups": spark.get("groups"),  # (window, key) groups Spark aggregated, summed over the micro-batches
        "breakdown": spark.get("breakdown"),  # where a steady micro-batch's time went, us per record
        "spark_cpu_us_per_record": run["spark_cpu_us_per_record"],
        "router_cpu_us_per_record": run["router_cpu"]["us_per_record"],
        "router_cpu_drain_s": run.get("router_cpu_drain_s"),
        "exact": run["exactness"]["exact"],
    }


def run_rounds(measure: Callable[[str, int], dict[str, Any]], configs: Sequence[str], rounds: int, n: int
               ) -> list[dict[str, Any]]:  # fmt: skip
    """Rounds 2..``rounds`` of ``configs`` at ``n``: ``measure(config, round)`` drains once and returns its document."""
    return [summary(measure(c, r), r) | {"n": n} for r in range(2, rounds + 1) for c in order(configs, r)]


def _drains(doc: dict[str, Any], n: int) -> dict[int, dict[str, dict[str, Any]]]:
    """Round -> configuration -> summary, for the backlog drains at ``n`` (round 1 from ``runs``)."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for r in doc["runs"]:
        if r["n"] == n and r["phase"] == "backlog":
            out.setdefault(1, {})[r["config"]] = r if "error" in r else summary(r, 1)
    for s in doc.get("rounds", []):
        if s["n"] == n:
            out.setdefault(s["round"], {})[s["config"]] = s
    return out


def paired(doc: dict[str, Any], n: int) -> dict[str, dict[str, Any]]:
    """Per configuration other than direct: its drain / direct's drain in each round, their median, min and max.

    Also per round the Spark CPU per record it saved (direct's minus its own) and its routers' CPU per record
    (routing), with their medians (``saved_median``, ``router_median``).

    A round where either drain failed, or was not exact, gives no ratio for that configuration. Nothing for a run
    of one round (its ratios against direct are the report's table), or without direct.
    """
    if _rounds(doc) < 2:
        return {}
    by_round = _drains(doc, n)
    if not any("direct" in drains for drains in by_round.values()):  # a run without direct: nothing to pair with
        return {}
    out: dict[str, dict[str, Any]] = {}
    for r, drains in sorted(by_round.items()):
        base = drains.get("direct")
        for config, s in drains.items():
            if config == "direct":
                continue
            row = out.setdefault(config, {"ratios": [], "rounds": [], "saved": [], "router": []})
            if base is None or "error" in base or "error" in s or not (base["exact"] and s["exact"]):
                continue
            if base["steady_rate"] and s["steady_rate"]:
                row["ratios"].append(s["steady_rate"] / base["steady_rate"])
                row["rounds"].append(r)
                row["saved"].append(base["spark_cpu_us_per_record"] - s["spark_cpu_us_per_record"])
                if s.get("router_cpu_us_per_record") is not None:
                    row["router"].append(s["router_cpu_us_per_record"])
    for row in out.values():
        v = row["ratios"]
        row |= {"median": statistics.median(v), "low": min(v), "high": max(v)} if v else {"median": None}
        row["saved_median"] = statistics.median(row["saved"]) if row["saved"] else None
        row["router_median"] = statistics.median(row["router"]) if row["router"] else None
    return out


def partials(doc: dict[str, Any], n: int, config: str = "dalton", base: str = "hash") -> list[dict[str, Any]]:
    """Per round at ``n``: ``config``'s shuffled partials against ``base``'s of the same round, both exact.

    Each round routes the backlog again, and how the router workers' outputs interleave in the combiner topic
    changes which (window, key) groups each micro-batch holds, so one round's ratio carries that noise (hash's
    groups varied by up to 8 % between runs of one command). The median over rounds is the steadier figure.
    Each entry: ``round``, ``ratio`` (``None`` when either drain failed, was not exact or has no count) and, when
    both have them, ``per_group`` (each one's partials per group). Nothing with one round.
    """
    if _rounds(doc) < 2:
        return []
    out: list[dict[str, Any]] = []
    for r, drains in sorted(_drains(doc, n).items()):
        a, b = drains.get(config), drains.get(base)
        if a is None and b is None:
            continue
        if a is None or b is None or not all("error" not in x and x["exact"] and x.get("partials") for x in (a, b)):
            out.append({"round": r, "ratio": None})
            continue
        row: dict[str, Any] = {"round": r, "ratio": a["partials"] / b["partials"]}
        if a.get("groups") and b.get("groups"):
            row["per_group"] = (a["partials"] / a["groups"], b["partials"] / b["groups"])
        out.append(row)
    return out


def _rounds(doc: dict[str, Any]) -> int:
    return int(doc.get("options", {}).get("rounds", 1))


def lines(doc: dict[str, Any], n: int) -> list[str]:
    """The report's table of paired ratios at ``n`` (nothing with one round)."""
    rounds = _rounds(doc)
    if rounds < 2:
        return []
    by_round = _drains(doc, n)
    configs = list(dict.fromkeys(c for d in by_round.values() for c in d))
    out = [
        "",
        f"Drain in {rounds} rounds, the order reversed every other round (rec/s; in parentheses the ratio to "
        "direct's drain of the same round; \\* not exact, - failed):",
        "",
        "| round | order | " + " | ".join(configs) + " |",
        "| --- | --- " + "| ---: " * len(configs) + "|",
    ]
    for r, drains in sorted(by_round.items()):
        base = (drains.get("direct") or {}).get("steady_rate")
        cells = []
        for c in configs:
            s = drains.get(c) or {"error": "not run"}
            if "error" in s or not s.get("steady_rate"):
                cells.append("-")
                continue
            ratio = f" ({s['steady_rate'] / base:.2f})" if base and c != "direct" else ""
            mark = "" if s["exact"] else NOT_EXACT
            cells.append(f"{s['steady_rate']:,.0f}{ratio}{mark}")
        out.append(f"| {r} | {'as given' if r % 2 else 'reversed'} | " + " | ".join(cells) + " |")
    for config, p in paired(doc, n).items():
        if p["median"] is None:
            out.append(f"- {config}: no round with both drains exact.")
            continue
        cpu = ""
        if p["router_median"] is not None:
            cpu = (f" Spark CPU saved per record (direct's minus its own, same round): median "
                   f"{p['saved_median']:.1f} us; its routers' CPU per record: median "
                   f"{p['router_median']:.1f} us.")  # fmt: skip
        out.append(f"- {config} / direct, paired per round: median {p['median']:.2f}x, range {p['low']:.2f}-"
                   f"{p['high']:.2f}x over {len(p['ratios'])} rounds.{cpu}")  # fmt: skip
    return out


def goals(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The goals of a run of several rounds (nothing for one round).

    Per routed configuration: its router CPU per record <= the Spark CPU per record it saved, at every ``n``
    (medians of the rounds); its drain >= direct's at the measured ``n`` (as many combiners as slots): the routed
    topic must not cost the job its drain rate, met on the median of the paired ratios, the note giving their
    range and whether every round is on the same side of 1.0.
    """
    if _rounds(doc) < 2:
        return []
    slots = int(doc["options"].get("slots", 2))
    out = _cpu_goals(doc)
    for n in sorted({r["n"] for r in doc["runs"] if r["n"] <= slots}):
        for config, p in paired(doc, n).items():
            if config.startswith("direct"):
                continue
            v = p["median"]
            if v is None:
                note = "no round with both drains exact"
            else:
                side = "every round >= 1" if p["low"] >= 1 else "every round < 1" if p["high"] < 1 else "rounds differ"
                note = f"range {p['low']:.2f}-{p['high']:.2f}x over {len(p['ratios'])} rounds ({side})"
            name = f"n={n}: {config} drain / direct drain, median of the rounds (local[{slots}])"
            out.append({"goal": name, "value": v, "target": ">= 1", "met": None if v is None else v >= 1.0,
                        "note": note})  # fmt: skip
    return out


def _cpu_goals(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each routed configuration's router CPU per record <= the Spark CPU per record it saves (medians of rounds)."""
    out = []
    for n in sorted({r["n"] for r in doc["runs"]}):
        for config, p in paired(doc, n).items():
            router, saved = p.get("router_median"), p.get("saved_median")
            if router is None or saved is None:
                continue
            v = router / saved if saved > 0 else None
            note = f"router {router:.1f} us/rec against {saved:.1f} us/rec of Spark CPU saved, medians of the rounds"
            out.append({"goal": f"n={n}: {config} router CPU / the Spark CPU it saves, per record", "value": v,
                        "target": "<= 1", "met": v is not None and v <= 1.0, "note": note})  # fmt: skip
    return out
