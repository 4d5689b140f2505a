"""One Dalton router over the sweep's grid while it catches up on a backlog: micro-batches that span many slides.

A Spark job catching up reads ``maxRecordsPerTrigger`` records per micro-batch, which can span many of the
route's slides, and Spark's cut falls wherever that many records end, not on a slide's start. Per cell of
:func:`benchmarks.sweep.grid`: one router with slide ``W / slides`` (window 12 slides), told it is catching up
(``set_backlog(True)``, as the data plane tells it), fed the sweep's random router batches; then max/mean and
replication per micro-batch of ``W`` tuples starting ``offset * W`` tuples into the stream, and the floor of
those micro-batches. A cell is over when max/mean > 1.05 or replication > floor + 0.05.
With ``--routers P``: P routers that own their keys (``raw_keys=partitioned``, each fed the keys of its own
raw partitions, as a raw topic keyed by the routing key is read), merging snapshots every few batches; each
reads its own batches at its own pace (a backlog), or with ``--in-step`` the same spans of the stream (live).

Prints one line per cell and the totals, and writes ``backlog-grid.json`` to ``--out``::

    python -m benchmarks.backlog_grid --window 50000 --slides 10 --offset 0.37
    python -m benchmarks.backlog_grid --window 50000 --slides 10 --offset 0 --live   # the flag off
    python -m benchmarks.backlog_grid --window 50000 --slides 10 --offset 0.37 --routers 4
    python -m benchmarks.backlog_grid --window 20000 --slides 1 --offset 0 --live --routers 4 --in-step
    python -m benchmarks.backlog_grid --window 20000 --slides 1 --offset 0 --live --routers 4 --in-step --plan-together

Run it on a worktree of an older commit (``PYTHONPATH=<worktree>``) for a side-by-side comparison.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.sweep import REPLICATION_ALLOWANCE, grid, replication_floor, stream_keys
from router.choose.measure import unaligned_batches
from router.choose.runner import key_owner, sync_routers
from router.partitioners import create
from router.partitioners.metrics import BALANCE_TARGET

__all__ = ["cell_quality", "main"]

SYNC_TURNS = 4  # several routers merge their snapshots every this many batches of each
I64 = npt.NDArray[np.int64]


def _in_step(feeds: list[npt.NDArray[np.intp]], total: int) -> list[list[tuple[int, int]]]:
    """Each router's batches when they read in step: random spans of the stream, each router its own tuples."""
    ends = [b for _, b in unaligned_batches(total, seed=11)]
    out = []
    for feed in feeds:
        cut = np.searchsorted(feed, ends).tolist()
        out.append(list(itertools.pairwise([0, *cut])))
    return out


def _route(
    keys: I64, n: int, slide: int, backlog: bool, routers: int, in_step: bool = False, together: bool = False
) -> I64:
    """Every tuple's combiner: ``routers`` routers, each fed its own keys in random batches, in turn.

    ``in_step``: the routers read the same spans of the stream (live), not each its own batches at its own pace;
    ``together``: they plan the combiners' load together (``plan_together``).
    """
    opts: dict[str, Any] = {}
    if routers > 1:
        opts = {"routers": routers, "raw_keys": "partitioned", **({"plan_together": True} if together else {})}
    parts = [create("dalton", n, window=12 * slide, slide=slide, seed=1 + r, **opts) for r in range(routers)]
    times = np.arange(keys.shape[0], dtype=np.int64)
    owner = key_owner(keys, routers)
    feeds = [np.flatnonzero(owner == r) for r in range(routers)]
    cuts = (
        _in_step(feeds, keys.shape[0])
        if in_step
        else [unaligned_batches(f.shape[0], seed=11 + r) for r, f in enumerate(feeds)]
    )
    out = np.full(keys.shape[0], -1, dtype=np.int64)
    for part in parts:
        part.set_backlog(backlog)
    for turn in range(max(len(c) for c in cuts)):
        for r, part in enumerate(parts):
            if turn < len(cuts[r]) and cuts[r][turn][1] > cuts[r][turn][0]:
                a, b = cuts[r][turn]
                sel = feeds[r][a:b]
                out[sel] = part.assign(keys[sel], times[sel])
        if routers > 1 and turn % SYNC_TURNS == SYNC_TURNS - 1:
            sync_routers(parts)
    return out


def cell_quality(
    keys: I64,
    n: int,
    window: int,
    slides: int,
    offset: int,
    *,
    backlog: bool = True,
    routers: int = 1,
    in_step: bool = False,
    together: bool = False,
) -> tuple[float, float, float]:
    """``(max/mean, replication, floor)``: means over the micro-batches of ``window`` tuples from ``offset``."""
    slide = max(1, window // slides)
    out = _route(keys, n, slide, backlog, routers, in_step, together)
    ratios, reps = [], []
    for start in range(offset, keys.shape[0] - window + 1, window):
        k, c = keys[start : start + window], out[start : start + window]
        _, inverse = np.unique(k, return_inverse=True)
        reps.append(np.unique(inverse.reshape(-1) * n + c).size / (int(inverse.max()) + 1))
        load = np.bincount(c, minlength=n)
        ratios.append(float(load.max() / load.mean()))
    floor = replication_floor(keys[offset:], n, window)
    return float(np.mean(ratios)), float(np.mean(reps)), floor


def main(argv: list[str] | None = None) -> int:
    """Run the grid (see the module doc)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.backlog_grid", description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=int, default=50_000, help="tuples per Spark micro-batch (W)")
    ap.add_argument("--slides", type=int, default=10, help="the route's slides per micro-batch")
    ap.add_argument("--offset", type=float, default=0.37, help="where the first micro-batch starts, in W")
    ap.add_argument("--live", action="store_true", help="do not tell the router it catches up")
    ap.add_argument("--routers", type=int, default=1, help="routers that own their keys (raw_keys=partitioned)")
    ap.add_argument("--in-step", action="store_true", help="several routers read the same spans of the stream (live)")
    ap.add_argument("--plan-together", action="store_true", help="several routers plan the combiners' load together")
    ap.add_argument("--out", type=Path, default=Path("."), help="folder for backlog-grid.json")
    args = ap.parse_args(argv)
    offset = int(args.offset * args.window)
    streams: dict[str, npt.NDArray[np.int64]] = {}
    rows: list[dict[str, Any]] = []
    for cell in grid(windows=(args.window,)):
        if cell.spec not in streams:
            streams[cell.spec] = stream_keys(cell.spec)
        ratio, rep, floor = cell_quality(
            streams[cell.spec],
            cell.n,
            args.window,
            args.slides,
            offset,
            backlog=not args.live,
            routers=args.routers,
            in_step=args.in_step,
            together=args.plan_together,
        )
        over = ratio > BALANCE_TARGET or rep > floor + REPLICATION_ALLOWANCE
        rows.append({"cell": cell.label, "n": cell.n, "ratio": ratio, "replication": rep, "floor": floor, "over": over})
        print(f"{cell.label:24s} n={cell.n:2d}  {ratio:.3f} / {rep:.3f}  (floor {floor:.3f}){'  over' if over else ''}")
    summary = {
        "cells": len(rows),
        "over": sum(r["over"] for r in rows),
        "over_balance": sum(r["ratio"] > BALANCE_TARGET for r in rows),
        "over_replication": sum(r["replication"] > r["floor"] + REPLICATION_ALLOWANCE for r in rows),
        "max_ratio": max(r["ratio"] for r in rows),
        "mean_excess": statistics.mean(r["replication"] - r["floor"] for r in rows),
    }
    print(
        f"over the targets: {summary['over']} of {summary['cells']} (max/mean {summary['over_balance']}, "
        f"replication {summary['over_replication']}); worst max/mean {summary['max_ratio']:.3f}; "
        f"mean replication over the floor {summary['mean_excess']:.4f}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    options = {"window": args.window, "slides": args.slides, "offset": args.offset, "live": args.live,
               "routers": args.routers, "in_step": args.in_step, "plan_together": args.plan_together}  # fmt: skip
    (args.out / "backlog-grid.json").write_text(json.dumps({"options": options, "summary": summary, "cells": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
