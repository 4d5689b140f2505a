from benchmarks.planes import PassThrough


def test_passthrough_spreads_records_evenly_over_all_combiners_across_batches() -> None:
    # The benchmark's baseline must write to all n combiners (same output I/O as a balancing partitioner).
    part = PassThrough(8)
    out = [c for lo in range(0, 8_003, 1_000) for c in part.assign(["k"] * min(1_000, 8_003 - lo)).tolist()]
    assert out[:10] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]
    counts = [out.count(c) for c in range(8)]
    assert sorted(set(out)) == list(range(8)) and max(counts) - min(counts) <= 1
