"""Memory soak of the data plane's CPU path: does the RSS plateau with many distinct keys and a far-future record.

``skewroute memory-soak --records 50000000 --keys 10000000`` (or ``python -m benchmarks.memory_soak`` with
``--tuples``) runs, for every partitioner, one child
process that feeds batches of raw records through :meth:`benchmarks.planes.OfflinePlane.route_batch` — the
data plane's own extraction (with the event-time bound), window clock, partitioner and window metrics — with no
Kafka. Keys: half uniform over ``--keys`` distinct keys, half Zipf-hot; Kafka timestamps advance at ``--rate``
records per event-time millisecond and end at the wall clock, so windows keep closing. In the middle of the run
one record carries a time ten years ahead. The child samples its RSS (``/proc/self/status``) ``--samples``
times; the verdict compares the RSS at the end with the RSS at half time (after the far-future record).

``--unbounded hash,dalton`` adds, for those partitioners, the same run with the event-time bound switched off
(a tolerance of ~30,000 years): the window clock jumps to the far-future record and no window closes any more,
which is what the bound prevents; its RSS growth shows that this benchmark can fail. Figures are noisy on a
shared machine. The report (markdown and JSON) goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.planes import OfflinePlane
from router.extract import SourceRecord
from router.observability import RouterMetrics
from router.partitioners import available
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings

__all__ = ["SoakFigures", "main", "run_one"]

FAR_AHEAD_MS = 10 * 365 * 86_400_000
UNBOUNDED_MS = 10**15


@dataclass
class SoakFigures:
    """One partitioner's run."""

    partitioner: str
    bounded: bool
    tuples: int
    keys: int
    seconds: float
    dead_lettered: int
    clock_ahead_s: float  # window clock minus wall clock at the end (> 0: frozen in the future)
    rss_mb: list[tuple[int, float]] = field(default_factory=list)  # (tuples so far, RSS MB)

    def _peak(self, lo: float, hi: float) -> float:
        return peak_rss(self.rss_mb, self.tuples, lo, hi)

    @property
    def growth_mb(self) -> float:
        """Peak RSS of the last quarter minus peak RSS of the second quarter (before the far-future record).

        Peaks, not end points: structures that fill up to a cap and are then cleared (the key cache) make the
        RSS a sawtooth, and an end point can land anywhere on it.
        """
        return self._peak(0.75, 1.0) - self._peak(0.25, 0.5)

    @property
    def plateau(self) -> bool:
        """The last quarter's peak is within 5 % (at least 16 MB, at most 64 MB) of the second quarter's."""
        return self.growth_mb < max(16.0, min(64.0, 0.05 * self._peak(0.25, 0.5)))


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_one(
    name: str, tuples: int, keys: int, *, batch: int = 20_000, rate: float = 10.0, combiners: int = 8,
    samples: int = 20, bounded: bool = True, seed: int = 0,
) -> SoakFigures:  # fmt: skip
    """Feed ``tuples`` records through one route's CPU path in this process; sample the RSS."""
    route = RouteSettings.model_validate(
        {"raw_topic": "mem", "combiners": combiners, "partitioner": {"name": name},
         "window": {"size": 60_000, "slide": 1_000},
         "time": {"max_ahead_ms": 3_600_000 if bounded else UNBOUNDED_MS}}
    )  # fmt: skip
    plane = OfflinePlane(KafkaSettings(), RouterSettings(), route, RouterMetrics("mem"), instance_id="mem")
    rng = np.random.default_rng(seed)
    rate = float(rate)
    now = int(time.time() * 1000)
    t0 = now - int(tuples / rate) - 60_000  # event times end about a minute before the wall clock
    every = max(batch, tuples // samples)
    figures = SoakFigures(name, bounded, tuples, keys, 0.0, 0, 0.0, [(0, _rss_mb())])
    start, done, next_sample, evil_at = time.perf_counter(), 0, every, tuples // 2
    while done < tuples:
        size = min(batch, tuples - done)
        half = size // 2
        ks = np.concatenate([rng.integers(0, keys, half), rng.zipf(1.2, size - half) % keys]).tolist()
        ts = (t0 + (done + np.arange(size)) / rate).astype(np.int64).tolist()
        pairs = enumerate(zip(ks, ts, strict=True))
        msgs = [SourceRecord("mem", 0, done + i, None, b'{"key":"k%d"}' % k, t) for i, (k, t) in pairs]
        if done <= evil_at < done + size:
            msgs.append(SourceRecord("mem", 0, done + size, None, b'{"key":"far-future"}', now + FAR_AHEAD_MS))
        ext, _ = plane.route_batch(msgs)
        figures.dead_lettered += len(ext.bad)
        done += size
        if done >= next_sample or done == tuples:
            figures.rss_mb.append((done, round(_rss_mb(), 1)))
            next_sample += every
    figures.seconds = round(time.perf_counter() - start, 1)
    figures.clock_ahead_s = round((plane._event_clock.now - time.time() * 1000) / 1000, 1)
    return figures


def _child(args: argparse.Namespace) -> None:
    fig = run_one(args.one, args.tuples, args.keys, batch=args.batch, rate=args.rate, combiners=args.combiners,
                  samples=args.samples, bounded=not args.child_unbounded, seed=args.seed)  # fmt: skip
    print(json.dumps({**asdict(fig), "growth_mb": fig.growth_mb, "plateau": fig.plateau}))


def _spawn(args: argparse.Namespace, name: str, bounded: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.memory_soak", "--one", name, "--tuples", str(args.tuples),
           "--keys", str(args.keys), "--batch", str(args.batch), "--rate", str(args.rate),
           "--combiners", str(args.combiners), "--samples", str(args.samples), "--seed", str(args.seed)]  # fmt: skip
    if not bounded:
        cmd.append("--child-unbounded")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout  # noqa: S603 - our own module
    return dict(json.loads(out.strip().splitlines()[-1]))


def peak_rss(rss_mb: list[tuple[int, float]], tuples: int, lo: float, hi: float) -> float:
    """Highest RSS sampled between fractions ``lo`` and ``hi`` of the run (the last sample if none)."""
    inside = [mb for n, mb in rss_mb if lo * tuples < n <= hi * tuples]
    return max(inside) if inside else rss_mb[-1][1]


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The markdown report."""
    lines = [
        f"# Memory soak — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"{args.tuples:,} tuples per run, {args.keys:,} distinct keys (half uniform, half Zipf 1.2), batches of "
        f"{args.batch:,}, {args.combiners} combiners, window 60 s / slide 1 s, {args.rate:g} tuples per event ms; "
        "one record ten years ahead at half time. RSS of a fresh child process per run (shared machine: noisy).",
        "",
        "| partitioner | event-time bound | s | dead-lettered | clock ahead of wall (s) | peak RSS, 2nd quarter (MB) "
        "| peak RSS, last quarter (MB) | growth (MB) | plateau |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        q2, q4 = (peak_rss(r["rss_mb"], r["tuples"], lo, hi) for lo, hi in ((0.25, 0.5), (0.75, 1.0)))
        lines.append(
            f"| {r['partitioner']} | {'on' if r['bounded'] else 'off'} | {r['seconds']} | {r['dead_lettered']} | "
            f"{r['clock_ahead_s']:,.0f} | {q2:,.0f} | {q4:,.0f} | {r['growth_mb']:,.1f} | "
            f"{'yes' if r['plateau'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line; returns 0 when every bounded run plateaued."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.memory_soak", description=__doc__.split("\n")[0])
    ap.add_argument("--tuples", type=int, default=50_000_000)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=10.0, help="tuples per event-time millisecond")
    ap.add_argument("--combiners", type=int, default=8)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--partitioners", default="all", help="comma-separated names, or all")
    ap.add_argument("--unbounded", default="", help="comma-separated partitioners to run also without the bound")
    ap.add_argument("--out", type=Path, default=Path(".skewroute/memory_soak"))
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--child-unbounded", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        _child(args)
        return 0
    names = available() if args.partitioners == "all" else args.partitioners.split(",")
    names = [n for n in names if n != "custom"]
    rows = []
    for name in names:
        for bounded in (True, False) if name in args.unbounded.split(",") else (True,):
            rows.append(_spawn(args, name, bounded))
            r = rows[-1]
            print(f"{name} bound={'on' if bounded else 'off'}: {r['seconds']} s, RSS {r['rss_mb'][-1][1]} MB, "
                  f"growth {r['growth_mb']:.1f} MB, plateau={r['plateau']}", flush=True)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory_soak.json").write_text(json.dumps(rows, indent=1))
    (args.out / "memory_soak.md").write_text(report(rows, args))
    print(report(rows, args))
    return 0 if all(r["plateau"] for r in rows if r["bounded"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
