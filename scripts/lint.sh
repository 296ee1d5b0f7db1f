#!/usr/bin/env bash
# Lint and type-check the product (kafka_eos_ds) and the tooling (kafka_eos_tools) with
# the virtual environment's ruff and mypy, configured in pyproject.toml ([tool.ruff],
# [tool.mypy]). Exits non-zero on any finding. Run scripts/setup.sh first.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-.venv}
for tool in ruff mypy; do
  [ -x "$venv/bin/$tool" ] || { echo "lint: $venv/bin/$tool is missing; run scripts/setup.sh" >&2; exit 1; }
done
rc=0
"$venv/bin/ruff" check || rc=1
"$venv/bin/mypy" || rc=1
exit "$rc"
