#!/usr/bin/env bash
# Runs every test: unit tests (no Kafka, no Spark) and integration tests against a
# real Apache Kafka (KAFKA_EOS_BOOTSTRAP if set, else Docker if present, else the
# embedded KRaft brokers) and a real local Spark. Installs what it needs first.
#
#   scripts/test.sh                        lint (ruff, mypy), the whole suite on the newest
#                                          pyspark, then the unit tests and the core
#                                          integration subset on each older pyspark line
#                                          (each in its own venv)
#   scripts/test.sh tests -k offsets       only these pytest arguments, newest pyspark
#   scripts/test.sh --pyspark 4.0.5 tests  the same on one older line
set -uo pipefail
cd "$(dirname "$0")/.."

# The newest patch of each older minor line the package claims (pyproject: pyspark>=4.0).
OLDER_LINES=(4.0.5 4.1.4 4.2.1)
# What the oldest line must pass besides the unit tests (about 7 minutes on 2 cores): the
# source (a batch read and bounded streaming batches over aborted transactions, side by
# side with Spark's built-in connector), the exactly-once sink at crash point 3 (a driver
# kill mid-commit), Spark Connect with a server kill and the README's main job. 4.0 differs
# most from the newest line (its sink gets rows, not Arrow; its source gets no read limits).
CORE_SUBSET=(
  "integration/test_source.py::test_batch_read_of_aborted_transactions_equals_builtin_read_committed"
  "integration/test_source.py::test_streaming_read_of_aborted_transactions_in_bounded_batches"
  "integration/test_sink_crash.py::test_3_driver_dies_after_committing_some_transactions"
  integration/test_spark_connect.py
  integration/test_demo.py
)
# 4.1 and 4.2 run the source tests and crash point 3 (about 4 minutes a line): their sink
# takes Arrow as the newest line's does, and 4.1's source applies its own read limits as
# 4.0's does. The other crash points, the file sink, the secured clusters and the chaos
# suite run on the newest line only (the whole run must stay inside CI's budget).
SHORT_SUBSET=("${CORE_SUBSET[@]:0:3}")

# One pytest run in one venv; its summary line goes to $summary.
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
run_pytest() {  # run_pytest LABEL VENV ARGS...
  local label=$1 venv=$2; shift 2
  local started rc log
  started=$(date +%s)
  log=$(mktemp)
  "$venv/bin/python" -m pytest -p no:cacheprovider "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 5 ]; then
    # pytest's 5 means nothing was collected: for this project that is a broken run.
    echo "test: pytest collected no tests for $label; failing the run" >&2
    rc=1
  fi
  printf '%-24s %-60s %5ss  exit %s\n' "$label" \
    "$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')" \
    "$(( $(date +%s) - started ))" "$rc" >> "$summary"
  rm -f "$log"
  return "$rc"
}

if [ "${1:-}" = "--pyspark" ]; then
  version=${2:?"test: --pyspark needs a version, e.g. 4.0.5"}; shift 2
  scripts/setup.sh --pyspark "$version" || exit 1
  run_pytest "pyspark $version" ".venv-pyspark-${version%.*}" "$@"
  exit $?
fi

scripts/setup.sh || exit 1
started=$(date +%s)
if [ "$#" -gt 0 ]; then
  run_pytest "pyspark (newest)" .venv "$@"
  rc=$?
  echo "test wall time: $(( $(date +%s) - started ))s"
  exit "$rc"
fi

failed=0
echo "== lint: ruff and mypy (scripts/lint.sh) =="
if scripts/lint.sh; then
  echo "lint                     clean" >> "$summary"
else
  echo "lint                     FAILED" >> "$summary"
  failed=1
fi
newest=$(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)')
run_pytest "pyspark $newest (full)" .venv || failed=1
for version in "${OLDER_LINES[@]}"; do
  if ! scripts/setup.sh --pyspark "$version"; then
    echo "pyspark $version: set-up failed" >> "$summary"
    failed=1
    continue
  fi
  if [ "$version" = "${OLDER_LINES[0]}" ]; then
    run_pytest "pyspark $version (core)" ".venv-pyspark-${version%.*}" tests "${CORE_SUBSET[@]}" || failed=1
  else
    run_pytest "pyspark $version (short)" ".venv-pyspark-${version%.*}" tests "${SHORT_SUBSET[@]}" || failed=1
  fi
done
echo
echo "== pyspark matrix =="
cat "$summary"
echo "test wall time: $(( $(date +%s) - started ))s"
total() { grep -oE "[0-9]+ $1" "$summary" | awk '{n += $1} END {print n + 0}'; }
echo "matrix: $(total passed) passed, $(( $(total failed) + $(total error) )) failed, $(total skipped) skipped"
exit "$failed"
