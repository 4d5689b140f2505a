"""Benchmarks of the partitioners: runner, reports, the advisor and the papers' reproduction suite."""

from router.choose.runner import BenchResult, BenchSpec, PartitionerRun, run_bench, sync_routers

__all__ = ["BenchResult", "BenchSpec", "PartitionerRun", "run_bench", "sync_routers"]
