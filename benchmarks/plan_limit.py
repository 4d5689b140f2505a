"""How close to the replication floor a stream lets any router get: with hindsight, and planned on the last micro-batch.

The sweep's floor (:func:`router.partitioners.metrics.replication_floor`) counts ``ceil(c_k / cap)`` pieces per
key, ``cap`` being a combiner's share of the micro-batch times :data:`BALANCE_TARGET`. It ignores how the pieces
fit together, so it is a lower bound. Two references for a cell where Dalton stays above it:

- **offline**: each micro-batch packed knowing its own exact key counts (:func:`pack`). If this reaches the
  floor, the floor is attainable, and what separates a router from it is not knowing the counts in advance.
- **planned**: each micro-batch packed on the *previous* micro-batch's exact counts (the first one on its own
  counts: clairvoyant there), then routed tuple by tuple in arrival order (:func:`route_planned`): a key fills
  its planned combiners up to its planned tuples, then the combiners it already reached, up to the cap, then
  the least loaded one. It knows more than a router does (the last micro-batch exactly, and the size of this
  one), and corrects online as a router must. It shows what planning on the last micro-batch can reach when the
  counts move from one micro-batch to the next. It is one such rule, not the best possible one, so it is
  evidence about the stream, not a proof.

Prints floor, offline, planned and Dalton (the sweep's measurement) per micro-batch size and writes
``plan-limit.json`` to ``--out``::

    python -m benchmarks.plan_limit --spec flights:key=dest,tuples=100000 -n 32 --windows 5000,20000
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.sweep import measure, replication_floor, stream_keys
from router.partitioners.metrics import BALANCE_TARGET

__all__ = ["pack", "planned_replication", "offline_replication", "route_planned"]

I64 = npt.NDArray[np.int64]
#: A plan: per key, its pieces as [combiner, tuples].
Plan = dict[int, list[list[int]]]


def pack(keys: Sequence[int], counts: Sequence[int], n: int, cap: int) -> Plan:
    """Pieces of every key on ``n`` combiners of ``cap`` tuples each, largest key first.

    A key goes whole to the combiner with the least room that holds it (best fit). A key that fits nowhere
    fills the combiners with the most room first, and its last piece goes to the best fit for it. Raises
    ``ValueError`` when the keys do not fit (``sum(counts) > n * cap``).
    """
    if sum(counts) > n * cap:
        raise ValueError(f"{sum(counts)} tuples do not fit on {n} combiners of {cap}")
    room = np.full(n, cap, dtype=np.int64)
    plan: Plan = {}
    for i in np.argsort(-np.asarray(counts, dtype=np.int64), kind="stable").tolist():
        left, pieces = int(counts[i]), []
        while left > 0:
            fits = np.flatnonzero(room >= left)
            c = int(fits[np.argmin(room[fits])]) if fits.size else int(np.argmax(room))
            put = min(left, int(room[c]))
            room[c] -= put
            left -= put
            pieces.append([c, put])
        plan[int(keys[i])] = pieces
    return plan


def route_planned(keys: I64, plan: Plan, n: int, cap: int) -> I64:
    """Each tuple's combiner, in arrival order, routed on ``plan`` with every combiner kept within ``cap``.

    A key's planned pieces first (up to their tuples), then the combiners the key already reached, then the
    least loaded combiner (above ``cap`` only when every combiner is full).
    """
    load = np.zeros(n, dtype=np.int64)
    out = np.empty(keys.shape[0], dtype=np.int64)
    quota = {k: [list(p) for p in pieces] for k, pieces in plan.items()}
    reached: dict[int, list[int]] = {}
    for t, k in enumerate(keys.tolist()):
        held = reached.setdefault(k, [])
        piece = next((p for p in quota.get(k, ()) if p[1] > 0 and load[p[0]] < cap), None)
        if piece is not None:  # the planned piece the tuple takes, found once
            c = piece[0]
            piece[1] -= 1
        else:
            c = next((b for b in held if load[b] < cap), -1)
            if c < 0:
                c = int(np.argmin(load))
        load[c] += 1
        out[t] = c
        if c not in held:
            held.append(c)
    return out


def _cap(window: int, n: int) -> int:
    return max(1, int(np.floor(BALANCE_TARGET * window / n)))


def _replication(keys: I64, out: I64, n: int) -> float:
    return float(np.unique(keys * n + out).shape[0] / np.unique(keys).shape[0])


def offline_replication(keys: I64, n: int, window: int) -> list[float]:
    """Per whole micro-batch: the replication of :func:`pack` on its own exact counts."""
    out = []
    for a in range(0, keys.shape[0] // window * window, window):
        uk, counts = np.unique(keys[a : a + window], return_counts=True)
        plan = pack(uk.tolist(), counts.tolist(), n, _cap(window, n))
        out.append(sum(len(p) for p in plan.values()) / uk.shape[0])
    return out


def planned_replication(keys: I64, n: int, window: int) -> tuple[list[float], list[float]]:
    """Per whole micro-batch: (replication, max/mean) of :func:`route_planned` on the previous one's packing."""
    reps, ratios = [], []
    last: tuple[list[int], list[int]] | None = None
    cap = _cap(window, n)
    for a in range(0, keys.shape[0] // window * window, window):
        k = keys[a : a + window]
        uk, counts = np.unique(k, return_counts=True)
        now = (uk.tolist(), counts.tolist())
        src = now if last is None else last
        # the previous micro-batch's counts packed against the mean (no slack: the slack absorbs what moved)
        plan = pack(src[0], src[1], n, -(-sum(src[1]) // n))
        out = route_planned(k, plan, n, cap)
        reps.append(_replication(k, out, n))
        load = np.bincount(out, minlength=n)
        ratios.append(float(load.max() / load.mean()))
        last = now
    return reps, ratios


def limits(spec: str, n: int, window: int) -> dict[str, Any]:
    """One cell's floor, offline, planned and Dalton figures (means over whole micro-batches)."""
    keys = stream_keys(spec)
    offline = offline_replication(keys, n, window)
    planned, ratios = planned_replication(keys, n, window)
    balance, replication, _ = measure("dalton", keys, n, window)
    return {
        "spec": spec,
        "n": n,
        "window": window,
        "floor": replication_floor(keys, n, window),
        "offline": float(np.mean(offline)),
        "planned": float(np.mean(planned)),
        "planned_steady": planned[1:],
        "planned_balance": float(np.mean(ratios)),
        "dalton": replication,
        "dalton_balance": balance,
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module doc."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.plan_limit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default="flights:key=dest,tuples=100000", help="workload spec (as in the sweep)")
    ap.add_argument("-n", "--combiners", type=int, default=32)
    ap.add_argument("--windows", default="5000,20000", help="micro-batch sizes W, comma-separated")
    ap.add_argument("--out", type=Path, default=Path("reports/plan-limit"))
    args = ap.parse_args(argv)
    rows = [limits(args.spec, args.combiners, int(w)) for w in args.windows.split(",")]
    print("| W | floor | offline | planned (max/mean) | dalton (max/mean) |")
    print("| ---: | ---: | ---: | --- | --- |")
    for r in rows:
        print(
            f"| {r['window']:,} | {r['floor']:.3f} | {r['offline']:.3f} | {r['planned']:.3f} "
            f"({r['planned_balance']:.3f}) | {r['dalton']:.3f} ({r['dalton_balance']:.3f}) |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "plan-limit.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
