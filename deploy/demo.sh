#!/usr/bin/env bash
# The README's "run it" command: install what is needed, then run the whole pipeline on the embedded
# defaults (Tansu broker, router workers, Spark local) and write the report. Extra arguments go to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup-venv.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/skewroute demo "$@"
