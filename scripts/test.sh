#!/usr/bin/env bash
# Runs every test: unit tests (no Kafka, no Spark) and integration tests against a
# real Apache Kafka (KAFKA_EOS_BOOTSTRAP if set, else Docker if present, else the
# embedded KRaft brokers) and a real local Spark. Installs what it needs first.
#
#   scripts/test.sh                        lint (ruff, mypy), the gate (-m gate) on the newest
#                                          pyspark, then the unit tests and the tests marked
#                                          matrix (4.0: and oldest) on each older pyspark
#                                          line (each in its own venv)
#   scripts/test.sh tests -k offsets       only these pytest arguments, newest pyspark
#   scripts/test.sh --pyspark 4.0.5 tests  the same on one older line
set -uo pipefail
cd "$(dirname "$0")/.."

# The newest patch of each older minor line the package claims (pyproject: pyspark>=4.0).
OLDER_LINES=(4.0.5 4.1.4 4.2.1)
# What each line runs is chosen by pytest markers (pyproject.toml, docs/testing.md): the
# newest line the gate (every test not marked `full`); every older line the unit tests and
# the tests marked `matrix` (the source and crash point 3); the oldest line, 4.0, which
# differs most from the newest (its sink gets rows, not Arrow; its source gets no read
# limits), also those marked `oldest` (Spark Connect and the README's main job).
NEWEST_RUN=(-m gate)
MATRIX_RUN=(-m "gate and matrix")
OLDEST_RUN=(-m "gate and (matrix or oldest)")

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
run_pytest "pyspark $newest (gate)" .venv "${NEWEST_RUN[@]}" || failed=1
for version in "${OLDER_LINES[@]}"; do
  if ! scripts/setup.sh --pyspark "$version"; then
    echo "pyspark $version: set-up failed" >> "$summary"
    failed=1
    continue
  fi
  if [ "$version" = "${OLDER_LINES[0]}" ]; then
    run_pytest "pyspark $version (oldest)" ".venv-pyspark-${version%.*}" "${OLDEST_RUN[@]}" || failed=1
  else
    run_pytest "pyspark $version (matrix)" ".venv-pyspark-${version%.*}" "${MATRIX_RUN[@]}" || failed=1
  fi
done
echo
echo "== pyspark matrix =="
cat "$summary"
echo "test wall time: $(( $(date +%s) - started ))s"
total() { grep -oE "[0-9]+ $1" "$summary" | awk '{n += $1} END {print n + 0}'; }
echo "matrix: $(total passed) passed, $(( $(total failed) + $(total error) )) failed, $(total skipped) skipped"
exit "$failed"
