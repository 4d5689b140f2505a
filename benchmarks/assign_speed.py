"""Batched ``assign`` throughput of one partitioner on a Zipf stream (wall and CPU tuples/s, best of 3).

python -m benchmarks.assign_speed --partitioner dalton --combiners 8 --batch 20000
"""

from __future__ import annotations

import argparse
import time

from benchmarks.workloads import zipf_keys
from router.partitioners import create

__all__ = ["measure"]


def measure(
    name: str, n: int, batch: int, records: int = 1_000_000, s: float = 1.5, rounds: int = 3
) -> tuple[float, float]:
    """Best wall-clock and CPU tuples/s of ``create(name, n).assign`` over ``records`` Zipf keys in batches."""
    keys = zipf_keys(records, s, 10_000, seed=1)
    wall = cpu = 0.0
    for _ in range(rounds):
        part = create(name, n, window=60_000, slide=1_000, seed=1)
        t0, c0 = time.perf_counter(), time.process_time()
        for lo in range(0, records, batch):
            part.assign(keys[lo : lo + batch])
        wall = max(wall, records / (time.perf_counter() - t0))
        cpu = max(cpu, records / max(time.process_time() - c0, 1e-9))
    return wall, cpu


def main(argv: list[str] | None = None) -> None:
    """Print wall and CPU tuples/s."""
    p = argparse.ArgumentParser(prog="benchmarks.assign_speed", description=__doc__.splitlines()[0])
    p.add_argument("--partitioner", "-p", default="dalton", help="registered partitioner name")
    p.add_argument("--combiners", "-n", type=int, default=8, help="number of combiners")
    p.add_argument("--batch", type=int, default=20_000, help="keys per assign call")
    p.add_argument("--records", type=int, default=1_000_000, help="stream length")
    p.add_argument("--zipf", type=float, default=1.5, help="Zipf exponent (10k keys)")
    a = p.parse_args(argv)
    wall, cpu = measure(a.partitioner, a.combiners, a.batch, a.records, a.zipf)
    print(f"{a.partitioner} n={a.combiners} batch={a.batch}: {wall:,.0f} tuples/s wall, {cpu:,.0f} CPU")


if __name__ == "__main__":
    main()
