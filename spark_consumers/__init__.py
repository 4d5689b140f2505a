"""PySpark Structured Streaming jobs: partial aggregation per combiner, final aggregation per key."""
