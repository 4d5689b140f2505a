#!/usr/bin/env bash
# The README's test command: install what is needed, lint, type-check, run every test.
# Integration tests start the embedded broker and a local Spark themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup-venv.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy router connectors spark_consumers schemas benchmarks
.venv/bin/python -m pytest "$@"
