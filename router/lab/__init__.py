"""Lab code: benchmarks and soak runs (never imported by the runtime)."""
