"""Spark-side lab: the Spark job benchmark and the pre-routed topic feeder used by benchmarks and tests."""
