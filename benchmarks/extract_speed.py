"""Extraction cost per record: record by record against Arrow's JSON reader, by route shape, record size and batch.

python -m benchmarks.extract_speed [--rounds 11] [--out reports]

Thread CPU per record, best of ``--rounds``, over 20,000 in-memory ``confluent_kafka.Message`` objects whose
values are ``{"key":…,"t":…,"x":…}`` (plus a padding field for the larger records). Three columns per row:
the per-record path (what routed format 1 runs), the Arrow path forced whatever the batch, and what the
extractor itself picks under format 2 (``router.extract_batch``: Arrow from ``ARROW_MIN`` records per batch,
from ``ARROW_MIN_BYTES`` per record on average for the plain shape). Writes ``OUT/extract-speed.md``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from router.extract import Extractor
from router.extract_batch import extract_arrow
from schemas.settings import RouteSettings

__all__ = ["BATCHES", "SHAPES", "main", "messages", "per_record_us"]

#: route shape -> the route settings that read it
SHAPES: dict[str, dict[str, Any]] = {
    "key field, Kafka timestamp (plain)": {},
    "key and time fields": {"time": {"source": "field", "field": "t", "unit": "ms"}},
    "key and time fields, measure": {"time": {"source": "field", "field": "t", "unit": "ms"}, "value_field": "x"},
    "key field, Kafka timestamp, measure": {"value_field": "x"},
}
#: batch sizes of the second table
BATCHES = (64, 256, 600, 1_000, 2_500, 20_000)
RECORDS = 20_000
T0_MS = 1_700_000_000_000


def messages(n: int, pad: int) -> list[Any]:
    """``n`` in-memory messages over 5,000 keys; ``pad`` extra bytes of padding field per value (0: none)."""
    from confluent_kafka import Message

    extra = b',"p":"' + b"a" * pad + b'"' if pad else b""
    return [
        Message(topic="raw", partition=0, offset=i, timestamp=(1, T0_MS + i),
                value=b'{"key":"k%d","t":%d,"x":1%s}' % (i % 5_000, T0_MS + i, extra))
        for i in range(n)
    ]  # fmt: skip


def _route(shape: dict[str, Any]) -> RouteSettings:
    return RouteSettings.model_validate(
        {"raw_topic": "raw", "combiners": 2, "key": {"source": "field", "field": "key"}, **shape}
    )


def per_record_us(run: Callable[[Sequence[Any]], object], msgs: list[Any], batch: int, rounds: int) -> float:
    """Best thread CPU µs per record of ``run`` over ``msgs`` cut into batches of ``batch``."""
    best = float("inf")
    for _ in range(rounds):
        t = time.thread_time()
        for lo in range(0, len(msgs), batch):
            run(msgs[lo : lo + batch])
        best = min(best, time.thread_time() - t)
    return 1e6 * best / len(msgs)


def _paths(route: RouteSettings) -> tuple[Callable[..., object], Callable[..., object], Callable[..., object]]:
    """Record by record, Arrow forced, and the extractor's own choice under format 2."""
    one = Extractor(route)
    chosen = Extractor(route, vectorized=True)
    plan = chosen._arrow  # noqa: SLF001 - the benchmark forces the path the extractor would choose by itself
    assert plan is not None
    limits, per = chosen._limits(), chosen._one  # noqa: SLF001

    def arrow(batch: Sequence[Any]) -> object:
        return extract_arrow(batch, plan, limits, per, 0)

    return one.extract, arrow, chosen.extract


def main(argv: list[str] | None = None) -> None:
    """Print both tables and write them to ``OUT/extract-speed.md``."""
    p = argparse.ArgumentParser(prog="benchmarks.extract_speed", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=11, help="repetitions per cell (the best is kept)")
    p.add_argument("--out", type=Path, default=Path("reports"), help="report folder")
    args = p.parse_args(argv)
    load = os.getloadavg()[0]
    lines = [
        "# Extraction cost per record",
        "",
        f"`python -m benchmarks.extract_speed --rounds {args.rounds}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"1-min load average {load:.2f}. Thread CPU µs per record, best of {args.rounds}, {RECORDS:,} records.",
        "",
        "## By route shape and record size (batches of 20,000)",
        "",
        "| route reads | bytes | per record | Arrow | Arrow / per record | format 2 picks |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    print("\n".join(lines), flush=True)
    for name, shape in SHAPES.items():
        route = _route(shape)
        for pad in (0, 150):
            msgs = messages(RECORDS, pad)
            size = sum(len(m.value()) for m in msgs) / len(msgs)
            one, arrow, chosen = (per_record_us(f, msgs, RECORDS, args.rounds) for f in _paths(route))
            row = f"| {name} | {size:.0f} | {one:.2f} | {arrow:.2f} | {arrow / one:.2f} | {chosen:.2f} |"
            lines.append(row)
            print(row, flush=True)
    msgs = messages(RECORDS, 0)
    size = sum(len(m.value()) for m in msgs) / len(msgs)
    head = [
        "",
        f"## By batch size (key and time fields, measure; {size:.0f}-byte records)",
        "",
        "| batch | per record | Arrow | Arrow / per record | format 2 picks |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += head
    print("\n".join(head), flush=True)
    paths = _paths(_route(SHAPES["key and time fields, measure"]))
    for batch in BATCHES:
        one, arrow, chosen = (per_record_us(f, msgs, batch, args.rounds) for f in paths)
        row = f"| {batch:,} | {one:.2f} | {arrow:.2f} | {arrow / one:.2f} | {chosen:.2f} |"
        lines.append(row)
        print(row, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "extract-speed.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / 'extract-speed.md'}")


if __name__ == "__main__":
    main()
