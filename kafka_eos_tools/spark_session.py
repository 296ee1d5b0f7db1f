"""The SparkSession the tests and the benchmarks start in-process: local[2],
sized for a 2-core machine, its driver JVM mapping the class archive of this venv
(:mod:`kafka_eos_tools.jvm_archive`)."""

from __future__ import annotations

import os
import sys
import tempfile

from kafka_eos_tools import jvm_archive


def spark_builder(app: str = "kafka-eos-tests", jars: str | None = None):
    """A local[2] SparkSession builder sized for a 2-core machine."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.python.worker.reuse", "true")
        # An idle query reports progress every second (run_to_end waits for it).
        .config("spark.sql.streaming.noDataProgressEventInterval", "1000")
        .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="kafka-eos-wh-"))
    )
    java_options = jvm_archive.java_options()
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    if jars:
        builder = builder.config("spark.jars", jars)
    return builder
