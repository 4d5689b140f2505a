"""The Spark benchmark's report renders measured and missing algorithms."""

from __future__ import annotations

from benchmarks.spark.bench import BenchResult, render_markdown
from spark_consumers.observability import BatchStats


def _batch(i: int, rows: int, ms: int, ratio: float, partials: int) -> BatchStats:
    return BatchStats("q", i, "t", rows, ms, 0.0, [100, 200, 300], [10, 20, 90], partials, ratio, 4.5)


def test_report_rates_ratios_and_na() -> None:
    hash_ = BenchResult("hash", 300, batches=[_batch(0, 100, 4000, 3.0, 10), _batch(1, 100, 1000, 2.5, 10)])
    hash_.batches.append(_batch(2, 100, 1000, 2.6, 10))
    dalton = BenchResult("dalton", 200, batches=[_batch(0, 100, 1000, 1.2, 11), _batch(1, 100, 1000, 1.3, 11)])
    missing = BenchResult("prompt", 0, error="UnknownPartitionerError: prompt")
    assert hash_.steady_rate == 100.0 and hash_.overall_rate == 50.0
    md = render_markdown([hash_, dalton, missing], {"records": 300})
    assert "| hash | python | 300 | 100 | 50 | 3.00, 2.50, 2.60 | 2.60 |" in md
    assert "| 11, 11 | 0.73x |" in md  # 22 partials vs hash's 30
    assert "| prompt | python | n/a |" in md


def test_report_jvm_rows_compare_with_their_own_source_and_flag_short_reads() -> None:
    py = BenchResult("hash", 200, batches=[_batch(0, 100, 1000, 1.0, 10), _batch(1, 100, 1000, 1.0, 10)])
    jvm = BenchResult("hash", 200, source="kafka", batches=[_batch(0, 100, 1000, 1.0, 20), _batch(1, 50, 500, 1.0, 20)])
    jvm.error = "read 150 of 200 records"
    dalton_jvm = BenchResult("dalton", 200, source="kafka", batches=[_batch(0, 100, 1000, 1.0, 10)] * 2)
    md = render_markdown([py, jvm, dalton_jvm], {"records": 200})
    assert "| hash | kafka | 150 of 200 (**ERROR**) |" in md
    assert "- hash/kafka: read 150 of 200 records" in md
    # partials relative to the same source's hash row (which erred here: n/a, not python's 20)
    assert md.splitlines()[[i for i, x in enumerate(md.splitlines()) if x.startswith("| dalton | kafka")][0]].endswith(
        "| n/a |"
    )
