"""Lab code: benchmarks and sweeps (never imported by the runtime)."""
