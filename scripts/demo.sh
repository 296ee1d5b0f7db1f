#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the main job (`python -m kafka_eos_tools demo`): an exactly-once
# Kafka -> Spark -> Kafka pipeline on an embedded Apache Kafka, with driver crashes,
# followed by an audit of the output. Arguments go to the demo
# (e.g. --bootstrap host:9092 to use your own cluster; --table to write a partitioned Hive
# table on an embedded HDFS instead of a topic; --help for all).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m kafka_eos_tools demo "$@"
