#!/usr/bin/env bash
# Submit skewroute's Spark consumer job to a cluster.
#
#   deploy/spark-submit.sh --master spark://spark-master:7077 --config deploy/configs/several-routes.yaml --route clicks
#   deploy/spark-submit.sh --master yarn --deploy-mode cluster --config skewroute.yaml        # YARN
#   SKEWROUTE_SPARK__SOURCE=kafka deploy/spark-submit.sh --master k8s://https://api:6443 ...  # Spark's Kafka source
#
# Every executor must be able to `import connectors.spark_source` (source=python): install the skewroute wheel
# into the executors' Python (image or --archives venv.tar.gz#env with PYSPARK_PYTHON=./env/bin/python), or ship
# it with --py-files (this script builds a zip of the packages when SKEWROUTE_PY_FILES=1).
# With source=kafka the job needs the spark-sql-kafka package matching Spark's Scala and Spark versions.
# Secrets: pass SASL passwords through the environment (SKEWROUTE_KAFKA__SASL_PASSWORD via
# spark.yarn.appMasterEnv.* / spark.kubernetes.driverEnv.*), never on the command line.
set -euo pipefail
cd "$(dirname "$0")/.."

MASTER="local[2]"; DEPLOY_MODE="client"; CONFIG="${SKEWROUTE_CONFIG:-}"; ROUTE=""; EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --master) MASTER="$2"; shift 2 ;;
    --deploy-mode) DEPLOY_MODE="$2"; shift 2 ;;
    --config) CONFIG="$2"; shift 2 ;;
    --route) ROUTE="$2"; shift 2 ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done

PY="${PYSPARK_PYTHON:-$PWD/.venv/bin/python}"
SPARK_VERSION="$("$PY" -c 'import pyspark; print(pyspark.__version__)')"
SOURCE="${SKEWROUTE_SPARK__SOURCE:-$("$PY" - "$CONFIG" <<'PY'
import sys
from schemas.settings import SkewrouteSettings
print(SkewrouteSettings.load(sys.argv[1] or None).spark.source)
PY
)}"
JOB="$("$PY" -c 'import spark_consumers.job as j; print(j.__file__)')"

ARGS=(--master "$MASTER" --deploy-mode "$DEPLOY_MODE" --name skewroute-spark
      --conf spark.sql.shuffle.partitions="${SKEWROUTE_SPARK__SHUFFLE_PARTITIONS:-8}"
      --conf spark.pyspark.python="$PY" --conf spark.pyspark.driver.python="$PY")
if [[ "$SOURCE" == "kafka" ]]; then
  ARGS+=(--packages "org.apache.spark:spark-sql-kafka-0-10_2.13:${SPARK_VERSION}")
fi
if [[ "${SKEWROUTE_PY_FILES:-0}" == "1" ]]; then
  ZIP="$(mktemp -d)/skewroute.zip"
  zip -qr "$ZIP" connectors schemas spark_consumers router -x '*__pycache__*'
  ARGS+=(--py-files "$ZIP")
fi
if [[ -n "$CONFIG" ]]; then
  ARGS+=(--files "$CONFIG")
  [[ "$DEPLOY_MODE" == "cluster" ]] && CONFIG="$(basename "$CONFIG")"
fi

JOB_ARGS=()
[[ -n "$CONFIG" ]] && JOB_ARGS+=(--config "$CONFIG")
[[ -n "$ROUTE" ]] && JOB_ARGS+=(--route "$ROUTE")
set -x
exec "${SPARK_SUBMIT:-spark-submit}" "${ARGS[@]}" "$JOB" "${JOB_ARGS[@]}" "${EXTRA[@]}"
