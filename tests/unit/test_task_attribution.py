"""Attributing combiner-stage tasks to combiners (Kafka partitions) for both Spark sources."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spark_consumers.observability import CombinerMetricsListener, source_deltas, source_kind
from spark_consumers.task_attribution import (
    BY_RANK,
    BY_RECORDS,
    SOURCE_ORDER,
    UNATTRIBUTED,
    attribute_tasks,
    match_by_records,
    partition_deltas,
)


def test_jvm_tasks_in_hash_order_are_put_back_in_partition_order() -> None:
    deltas = [50, 300, 120, 10]  # partition i's offsets in the batch = its records (no markers)
    task_records = [120, 10, 300, 50]  # Spark's task order: partitions 2, 3, 1, 0
    a = attribute_tasks("kafka", task_records, deltas)
    assert a.method == BY_RECORDS
    assert a.tasks == [3, 2, 0, 1]
    assert a.reorder(task_records) == deltas
    assert a.reorder([7, 8, 9, 6]) == [6, 9, 7, 8]  # task times follow their task


def test_empty_partitions_get_zero_and_lists_keep_one_entry_per_combiner() -> None:
    deltas = [0, 40, 0, 25, 60]  # partitions 0 and 2 had nothing: the JVM source plans no task for them
    task_records = [25, 60, 40]
    a = attribute_tasks("kafka", task_records, deltas)
    assert a.method == BY_RECORDS
    assert a.tasks == [None, 2, None, 0, 1]
    assert a.reorder(task_records) == [0, 40, 0, 25, 60]
    assert a.reorder([11, 22, 33]) == [0, 33, 0, 11, 22]


def test_ties_pair_in_task_order_and_partition_order() -> None:
    a = match_by_records([30, 30, 70], [30, 70, 30])
    assert a.method == BY_RECORDS
    assert a.tasks == [0, 2, 1]  # first tied partition gets the first tied task


def test_markers_make_deltas_larger_than_counts_still_exact_when_counts_fit_one_way() -> None:
    deltas = [103, 12, 55]  # 100, 10 and 52 records plus commit markers: 100 fits only 103, 52 only 55 then
    task_records = [52, 100, 10]
    a = attribute_tasks("kafka", task_records, deltas)
    assert a.method == BY_RECORDS
    assert a.tasks == [1, 2, 0]
    assert a.reorder(task_records) == [100, 10, 52]


def test_markers_with_close_counts_are_a_rank_guess_spreading_markers_evenly() -> None:
    # 600 records + 2 markers in partition 0 and 601 + 0 in partition 1 fit as well as 601 + 1 and 600 + 1:
    # both pairings are possible; rank takes the even one (one marker each) and says it guessed.
    a = attribute_tasks("kafka", [600, 601], [602, 601])
    assert a.method == BY_RANK
    assert a.tasks == [1, 0]
    assert a.reorder([600, 601]) == [601, 600]


def test_task_count_mismatch_keeps_task_order_and_flags_it() -> None:
    task_records = [30, 20, 10, 40]  # minPartitions cut a range: 4 tasks for 3 non-empty partitions
    a = attribute_tasks("kafka", task_records, [50, 0, 30, 20])
    assert a.method == UNATTRIBUTED
    assert "4 tasks for 3 non-empty partitions" in a.reason
    assert a.reorder(task_records) == task_records


def test_a_task_larger_than_its_partition_is_flagged_not_forced() -> None:
    a = match_by_records([90, 5], [80, 10])  # impossible: 90 records from an 80-offset range
    assert a.method == UNATTRIBUTED
    assert "more than partition 0's 80" in a.reason
    assert a.reorder([90, 5]) == [90, 5]


def test_python_source_is_in_partition_order_unless_split() -> None:
    a = attribute_tasks("python", [5, 0, 9], [5, 0, 9])
    assert (a.method, a.tasks) == (SOURCE_ORDER, [0, 1, 2])
    split = attribute_tasks("python", [5, 4, 5, 9], [14, 0, 9])
    assert split.method == UNATTRIBUTED and split.reorder([1, 2, 3, 4]) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="source=.*'jdbc'"):
        attribute_tasks("jdbc", [1], [1])


def test_partition_deltas_in_partition_number_order_first_batch_from_zero() -> None:
    start = {"t": {"0": 10, "10": 5, "2": 7}}
    end = {"t": {"0": 15, "10": 5, "2": 9, "1": 4}}  # "10" after "2"; "1" new (no start): from 0
    assert partition_deltas(start, end) == [5, 4, 2, 0]
    assert partition_deltas({}, {"t": {"1": 3, "0": 8}}) == [8, 3]
    assert partition_deltas({"t": {"0": 9}}, {"t": {"0": 4}}) == [0]  # went backwards: nothing read


def test_source_kind_and_deltas_from_progress_sources() -> None:
    jvm = SimpleNamespace(
        description="KafkaV2[Subscribe[combiners]]", startOffset='{"c":{"1":4,"0":2}}', endOffset='{"c":{"0":5,"1":4}}'
    )
    py = SimpleNamespace(description="PythonMicroBatchStream", startOffset=None, endOffset={"c": {"0": 3}})
    assert source_kind([jvm]) == "kafka"
    assert source_kind([py]) == "python"
    assert source_kind([]) == "python"
    assert source_deltas([jvm]) == [3, 0]
    assert source_deltas([py]) == [3]


def test_listener_refuses_an_unknown_source_by_name() -> None:
    with pytest.raises(ValueError, match="source=.*'jdbc'"):
        CombinerMetricsListener(None, source="jdbc")  # type: ignore[arg-type]
    assert CombinerMetricsListener(None, source="kafka").source == "kafka"  # type: ignore[arg-type]
