"""Extraction cost per record: record by record against the compiled scan, by route shape, record size and batch.

python -m benchmarks.extract_speed [--rounds 11] [--out reports]

Thread CPU per record, best of ``--rounds``, over 20,000 in-memory ``confluent_kafka.Message`` objects whose
values are ``{"key":…,"t":…,"x":…}`` (plus a padding field for the larger records). Three columns per row:
the per-record path (what routed format 1 runs), the scan path forced whatever the batch, and what the
extractor itself picks under format 2 (``router.extract_batch``: the scan from ``SCAN_MIN`` records per batch,
up to ``SCAN_MAX_BYTES`` per record on average). Writes ``OUT/extract-speed.md``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from router.extract import Extractor
from router.extract_batch import extract_scan
from schemas.settings import RouteSettings

__all__ = ["BATCHES", "CONTENTS", "SHAPES", "main", "messages", "per_record_us"]

#: route shape -> the route settings that read it
SHAPES: dict[str, dict[str, Any]] = {
    "key field, Kafka timestamp (plain)": {},
    "key and time fields": {"time": {"source": "field", "field": "t", "unit": "ms"}},
    "key and time fields, measure": {"time": {"source": "field", "field": "t", "unit": "ms"}, "value_field": "x"},
    "key field, Kafka timestamp, measure": {"value_field": "x"},
}
#: batch sizes of the second table
BATCHES = (16, 32, 64, 128, 256, 1_000, 20_000)
RECORDS = 20_000
T0_MS = 1_700_000_000_000


#: record content -> the fields after key, time and measure (for the third table)
CONTENTS: dict[str, Callable[[int], bytes]] = {
    "one string field, 500 B": lambda i: b',"p":"' + b"a" * 500 + b'"',
    "one string field, 1 KB": lambda i: b',"p":"' + b"a" * 1000 + b'"',
    "one string field, 4 KB": lambda i: b',"p":"' + b"a" * 4000 + b'"',
    "10 short fields": lambda i: b"".join(b',"f%d":%d' % (j, i + j) for j in range(10)),
    "40 short fields": lambda i: b"".join(b',"f%d":"v%d"' % (j, i + j) for j in range(40)),
    "100 short fields": lambda i: b"".join(b',"f%d":%d.5' % (j, i + j) for j in range(100)),
    "a nested object": lambda i: b',"o":{"a":[1,2,{"b":"c"}],"d":null,"e":true}',
}


def messages(n: int, pad: int, extra: Callable[[int], bytes] | None = None) -> list[Any]:
    """``n`` in-memory messages over 5,000 keys.

    ``pad``: extra bytes of a padding field per value (0: none); or ``extra``, the fields after the measure.
    """
    from confluent_kafka import Message

    more = extra or (lambda i: b',"p":"' + b"a" * pad + b'"' if pad else b"")
    return [
        Message(topic="raw", partition=0, offset=i, timestamp=(1, T0_MS + i),
                value=b'{"key":"k%d","t":%d,"x":1%s}' % (i % 5_000, T0_MS + i, more(i)))
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
    """Record by record, the scan forced, and the extractor's own choice under format 2."""
    one = Extractor(route)
    chosen = Extractor(route, vectorized=True)
    plan = chosen._plan  # noqa: SLF001 - the benchmark forces the path the extractor would choose by itself
    assert plan is not None
    limits, per = chosen._limits(), chosen._one  # noqa: SLF001

    def scan(batch: Sequence[Any]) -> object:
        return extract_scan(batch, plan, limits, per)

    return one.extract, scan, chosen.extract


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
        "| route reads | bytes | per record | scan | scan / per record | format 2 picks |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    print("\n".join(lines), flush=True)
    for name, shape in SHAPES.items():
        route = _route(shape)
        for pad in (0, 150):
            msgs = messages(RECORDS, pad)
            size = sum(len(m.value()) for m in msgs) / len(msgs)
            one, scan, chosen = (per_record_us(f, msgs, RECORDS, args.rounds) for f in _paths(route))
            row = f"| {name} | {size:.0f} | {one:.2f} | {scan:.2f} | {scan / one:.2f} | {chosen:.2f} |"
            lines.append(row)
            print(row, flush=True)
    msgs = messages(RECORDS, 0)
    size = sum(len(m.value()) for m in msgs) / len(msgs)
    head = [
        "",
        f"## By batch size (key and time fields, measure; {size:.0f}-byte records)",
        "",
        "| batch | per record | scan | scan / per record | format 2 picks |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += head
    print("\n".join(head), flush=True)
    paths = _paths(_route(SHAPES["key and time fields, measure"]))
    for batch in BATCHES:
        one, scan, chosen = (per_record_us(f, msgs, batch, args.rounds) for f in paths)
        row = f"| {batch:,} | {one:.2f} | {scan:.2f} | {scan / one:.2f} | {chosen:.2f} |"
        lines.append(row)
        print(row, flush=True)
    head = [
        "",
        "## By record content (key and time fields, measure; batches of 5,000)",
        "",
        "| content | bytes | per record | scan | scan / per record | format 2 picks |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += head
    print("\n".join(head), flush=True)
    for name, extra in CONTENTS.items():
        msgs = messages(5_000, 0, extra)
        size = sum(len(m.value()) for m in msgs) / len(msgs)
        one, scan, chosen = (per_record_us(f, msgs, 5_000, args.rounds) for f in paths)
        row = f"| {name} | {size:.0f} | {one:.2f} | {scan:.2f} | {scan / one:.2f} | {chosen:.2f} |"
        lines.append(row)
        print(row, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "extract-speed.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / 'extract-speed.md'}")


if __name__ == "__main__":
    main()
