#!/usr/bin/env bash
# Runs every test: unit tests (no Kafka, no Spark) and integration tests against a
# real Apache Kafka (KAFKA_EOS_BOOTSTRAP if set, else Docker if present, else the
# embedded KRaft brokers) and a real local Spark. Installs what it needs first.
# Extra arguments go to pytest (e.g. scripts/test.sh tests -k offsets).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1

started=$(date +%s)
.venv/bin/python -m pytest -p no:cacheprovider "$@"
rc=$?
echo "test wall time: $(( $(date +%s) - started ))s"
if [ "$rc" -eq 5 ]; then
  # pytest's 5 means nothing was collected: for this project that is a broken run.
  echo "test: pytest collected no tests; failing the run" >&2
  exit 1
fi
exit "$rc"
