"""The e2e-bench report: ``result.json``, ``report.md`` (tables; goals in :mod:`.goals`) and plots, from a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.demo.report import write_json
from benchmarks.e2e import rounds
from benchmarks.e2e.goals import drain_rate, fmt, goals, ratio, verdict
from benchmarks.e2e.plots import finished_runs, write_plots

__all__ = ["render_markdown", "write_report"]


def _per_batch(partials: list[int] | None, floor: list[float] | None) -> str:
    """Mean partials per micro-batch, and in brackets the floor's mean (whole micro-batches of the input)."""
    if not partials:
        return "n/a"
    mean = f"{sum(partials) / len(partials):,.0f}"
    return f"{mean} ({sum(floor) / len(floor):,.0f})" if floor else mean


def _table(doc: dict[str, Any], n: int) -> list[str]:
    back, rate = finished_runs(doc, n, "backlog"), finished_runs(doc, n, "rate")
    base = back.get("direct", {}).get("spark", {}).get("steady_rate")
    lines = [
        f"### n = {n} combiners, Spark local[2]",
        "",
        "| configuration | drain rec/s (steady) | vs direct | micro-batch ms | latency p50 / p95 / p99 s | "
        "partials shuffled | partials per micro-batch (floor) | records max/mean per micro-batch | all shuffled rows | "
        "straggler median | makespan C=2 / 8 / 32 / 128 ms | Spark CPU s | router CPU s / M rec | total CPU us / rec | "
        "exact |",
        "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for config, r in back.items():
        s = r["spark"]
        lat = rate.get(config, {}).get("latency", {})
        mk = s["makespan_ms"]
        exact = r["exactness"]["exact"] and rate.get(config, {}).get("exactness", {}).get("exact", True)
        bms = ", ".join(str(x) for x in s["batch_ms"][:8]) + (" ..." if len(s["batch_ms"]) > 8 else "")
        lines.append(
            f"| {config} | {fmt(s['steady_rate'])} | {fmt(ratio(s['steady_rate'], base), '.2f')} | {bms} | "
            f"{fmt(lat.get('p50'), '.2f')} / {fmt(lat.get('p95'), '.2f')} / {fmt(lat.get('p99'), '.2f')} | "
            f"{fmt(s['shuffled_partials'])} | {_per_batch(s.get('partials_per_batch'), r.get('partials_floor'))} | "
            f"{fmt(s.get('record_max_mean'), '.3f')} | {fmt(s['shuffled_all_stages'])} | "
            f"{fmt(s['straggler_median'], '.2f')} | "
            f"{' / '.join(fmt(mk.get(f'C{c}')) for c in (2, 8, 32, 128))} | {fmt(r['spark_cpu_s'], '.1f')} | "
            f"{fmt(r['router_cpu_s_per_million'], '.1f')} | {fmt(r['total_cpu_us_per_record'], '.1f')} | "
            f"{'yes' if exact else 'NO'} |"
        )
    lines += _recheck_lines(doc, n)
    lines += rounds.lines(doc, n)
    lines += _model_lines(back, n)
    rates = {r["latency"]["rate"] for r in rate.values() if "latency" in r}
    if rates:
        exact = ", ".join(c for c, r in rate.items() if r["exactness"]["exact"]) or "none"
        lines += ["", f"Latency phase at {', '.join(f'{x:,.0f}' for x in sorted(rates))} records/s (exact: {exact})."]
    return lines + [""]


def _model_lines(back: dict[str, dict[str, Any]], n: int) -> list[str]:
    """Per configuration: where a steady micro-batch's time goes, and the drain modelled on C slots."""
    cs = sorted({2, 8, 32, 128, n})
    lines = [
        "",
        f"Where the time goes (steady micro-batches, us per record) and the drain modelled on C slots (n = {n}):",
        "",
        "| configuration | batch | combiner stage wall | combiner task work | later stages | fixed | router CPU | "
        + " | ".join(f"C={c} rec/s" for c in cs)
        + f" | C={n}: vs direct | C={n}: vs direct-split |",
        "| --- " + "| ---: " * (8 + len(cs)) + "|",
    ]
    for config, r in back.items():
        b = r["spark"].get("breakdown") or {}
        model = r["spark"].get("model") or {}
        vs = [fmt(ratio(drain_rate(r, n), drain_rate(back.get(base), n)), ".2f") for base in ("direct", "direct-split")]
        lines.append(
            f"| {config} | "
            + " | ".join(
                fmt(b.get(k), ".1f")
                for k in ("batch_us", "combiner_wall_us", "combiner_task_us", "after_wall_us", "fixed_us")
            )  # fmt: skip
            + f" | {fmt(r.get('router_cpu_s_per_million'), '.1f')} | "
            + " | ".join(fmt((model.get(f"C{c}") or {}).get("rate")) for c in cs)
            + f" | {vs[0]} | {vs[1]} |"
        )
    return lines


def _model_check_lines(doc: dict[str, Any]) -> list[str]:
    check = doc.get("model_check") or {}
    if not check.get("configs"):
        return []
    slots = doc["options"].get("slots", 2)
    lines = [
        "## The model, checked",
        "",
        f"The same backlog drained again on {check.get('master', 'local[1]')} at n = {check['n']}; each steady "
        f"micro-batch's time on {slots} slots predicted from its one-slot stages (fixed part + list-scheduled "
        f"stages) against the micro-batch measured on local[{slots}]. Model error (max |total|): "
        f"{fmt(doc.get('model_error'), '.1%')}.",
        "",
        "| configuration | local[1] rec/s | predicted local[2] rec/s | measured local[2] rec/s | error (drain time) | "
        "mean abs error per batch |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in check["configs"]:
        e = c.get("error") or {}
        if c.get("failed"):
            lines.append(f"| {c['config']} | failed: {str(c['failed'])[:120]} | | | | |")
            continue
        lines.append(
            f"| {c['config']} | {fmt(c.get('one_slot_rate'))} | {fmt(c.get('predicted_rate'))} | "
            f"{fmt(c.get('measured_rate'))} | {fmt(e.get('total'), '+.1%')} | {fmt(e.get('batch_mean_abs'), '.1%')} |"
        )
    return [*lines, ""]


def _recheck_lines(doc: dict[str, Any], n: int) -> list[str]:
    """Direct measured again after the other configurations: the noise floor of the ratios against direct."""
    out = []
    for c in (c for c in doc.get("rechecks", []) if c["n"] == n):
        if "error" in c:
            out.append(f"Direct measured again after the others: failed ({c['error'].splitlines()[0][:200]}).")
            continue
        d = c["drift"]
        out.append(
            f"Direct measured again after the others: {fmt(c['again_rate'])} rec/s (first {fmt(c['first_rate'])}, "
            f"drift {'n/a' if d is None else f'{d:+.0%}'}): ratios against direct are uncertain by about that much."
        )
    return ["", *out] if out else []


def _warm_line(doc: dict[str, Any]) -> list[str]:
    w = doc.get("warm_up") or {}
    if not w.get("records"):
        return ["Warm-up: none (the first configuration pays for the session's warm-up).", ""]
    rates = ", ".join(fmt(r) for r in w.get("rates", [])) or "none"
    how = "settled" if w.get("settled") else "**not settled**: the first configuration may still pay warm-up"
    fail = f" (failed: {w['error'].splitlines()[0][:200]})" if w.get("error") else ""
    others = w.get("configs") or {}
    then = (" Then one pass of each other configuration (" + ", ".join(f"{c} {fmt(r)}" for c, r in others.items())
            + " rec/s): the first pass of each plan is slower than its later ones.") if others else ""  # fmt: skip
    return [
        f"Warm-up (unreported): direct backlog passes of {w['records']:,} records at n = {w['n']}, drained at "
        f"{rates} rec/s -- {how} (two consecutive passes within {w['tolerance']:.0%}){fail}. A cold session made "
        f"the first configuration (direct) look ~2x slower than it is.{then}",
        "",
    ]


def render_markdown(doc: dict[str, Any]) -> str:
    """The report of a run document."""
    o, m = doc["options"], doc["machine"]
    lines = [
        "# skewroute e2e-bench: what routing buys a Spark job",
        "",
        f"Workload `{o['workload']}`; backlog phase {o['records']:,} records (micro-batches of at most "
        f"{o['batch']:,}); profile {o.get('profile', 'light')}: {', '.join(doc['aggregations'])} per key and "
        f"{o['window_s']} s tumbling "
        f"window; {o['routers']} router workers; m = {o['reducers']} reducers. Finished {doc['finished']}, "
        f"{doc['seconds']:.0f} s, {m['cores']} cores, load average (1/5/15 min) "
        f"{'/'.join(f'{x:.1f}' for x in m['load_start'])} at the start, "
        f"{'/'.join(f'{x:.1f}' for x in m['load_end'])} at the end (a shared, loaded machine: figures are noisy).",
        "",
        *(
            ["**Interrupted**: the tables hold the runs finished before the stop.", ""]
            if doc.get("interrupted")
            else []
        ),
        "Drain: steady micro-batches (all but the first) of the job draining the backlog. Latency: per record, "
        "production -> the first result of its (window, key) counting it, with the input produced at the latency "
        "phase's rate. Makespan: the combiner stage's measured task times list-scheduled on C slots, summed over "
        "the steady micro-batches. Partials per micro-batch: the (window, key) groups each combiner task ships, "
        "averaged over the backlog's micro-batches; the floor is the fewest any placement could ship with every "
        "combiner task within 1.05x the mean, knowing each micro-batch's exact counts (the input in event-time "
        "order, in micro-batches of the backlog's size). Records max/mean: the combiner tasks' records per "
        "micro-batch, weighted by its records. CPU: Spark's process tree while draining; router workers' while "
        "routing.",
        "",
        *_warm_line(doc),
    ]
    for n in sorted({r["n"] for r in doc["runs"]}, reverse=True):
        lines += _table(doc, n)
    failed = [r for r in doc["runs"] if "error" in r]
    if failed:
        lines += ["Failed runs:", ""] + [
            f"- n={r['n']} {r['phase']} {r['config']}: {r['error'].splitlines()[0][:300]}" for r in failed
        ]
        lines.append("")
    lines += _model_check_lines(doc)
    lines += ["## Goals", "", "| goal | measured | target | met | measured reason |",
              "| --- | ---: | --- | --- | --- |"]  # fmt: skip
    for g in doc.get("goals", []):
        met = "n/a" if g["met"] is None else ("yes" if g["met"] else "**missed**")
        lines.append(f"| {g['goal']} | {fmt(g['value'], '.2f')} | {g['target']} | {met} | {g.get('note', '')} |")
    lines += ["", "## Verdict", "", *verdict(doc)]
    lines += ["", "![latency over time](latency.png)", "", "![per-task load per micro-batch](tasks.png)", ""]
    return "\n".join(lines)


def write_report(doc: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write ``result.json``, ``report.md`` and the plots under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    doc["goals"] = goals(doc)
    write_json(doc, out / "result.json")
    (out / "report.md").write_text(render_markdown(doc), encoding="utf-8")
    lat, tasks = write_plots(doc, out)
    return {"json": out / "result.json", "markdown": out / "report.md", "latency": lat, "tasks": tasks}
