"""Lab code: benchmarks and demonstrations built on the runtime (the runtime never imports this package)."""
