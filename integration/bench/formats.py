"""Bench-only formats registered next to ``kafka_eos``; the connector itself is unchanged.

* ``kafka_eos_timed``: the kafka_eos sink with its per-batch driver commit timed. Same
  writers; each ``commit()`` call (what Spark's commit process runs once per batch: read
  the latest decision, write ``decided``, end every task's transaction, write ``done``)
  appends its duration and task count as a JSON line to the file named by the option
  ``benchCommitLog``. The built-in sink has no such step (its tasks' writes are final).
* ``kafka_eos_baseline``: the kafka_eos source reading with ``reading.py`` as it was at a
  git revision (``--baseline-read REV``), for before/after measurements in one run.

Both classes are pickled by value so Spark's Python workers need not import this module.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from kafka_eos_ds.datasource import KafkaEosDataSource
from kafka_eos_ds.sink.writers import KafkaBatchWriter, KafkaStreamWriter
from kafka_eos_ds.source.stream_reader import KafkaStreamReader

TIMED = "kafka_eos_timed"
BASELINE = "kafka_eos_baseline"
COMMIT_LOG_OPTION = "benchCommitLog"
REPO = Path(__file__).resolve().parents[2]


def _option(options: Mapping[str, Any], name: str) -> Any:
    return next((v for k, v in options.items() if k.lower() == name.lower()), None)


class _TimedCommit:
    def __init__(self, schema: Any, options: Mapping[str, Any], overwrite: bool = False) -> None:
        super().__init__(schema, options, overwrite)  # type: ignore[call-arg]
        self._bench_log = _option(options, COMMIT_LOG_OPTION)

    def commit(self, messages: list, *batch_id: int) -> None:
        started = time.perf_counter()
        super().commit(messages, *batch_id)  # type: ignore[misc]
        if self._bench_log:
            with open(self._bench_log, "a") as fh:
                fh.write(json.dumps({"seconds": time.perf_counter() - started, "tasks": len(messages)}) + "\n")


class TimedStreamWriter(_TimedCommit, KafkaStreamWriter):
    pass


class TimedBatchWriter(_TimedCommit, KafkaBatchWriter):
    pass


class TimedKafkaEos(KafkaEosDataSource):
    @classmethod
    def name(cls) -> str:
        return TIMED

    def writer(self, schema: Any, overwrite: bool) -> Any:
        return TimedBatchWriter(schema, self.options, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return TimedStreamWriter(schema, self.options, overwrite)


class CommitLog:
    """A fresh file per run for ``benchCommitLog``; ``seconds()`` reads what the commits wrote."""

    def __init__(self) -> None:
        self.path = tempfile.mkstemp(prefix="bench-commits-", suffix=".jsonl")[1]

    def seconds(self) -> list[float]:
        lines = Path(self.path).read_text().splitlines()
        Path(self.path).unlink(missing_ok=True)
        return [json.loads(line)["seconds"] for line in lines if line.strip()]


def _baseline_source(rev: str) -> type:
    """A data source whose stream reader reads with ``reading.py`` at git revision ``rev``."""
    import types

    code = subprocess.run(["git", "show", f"{rev}:kafka_eos_ds/source/reading.py"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout
    module = types.ModuleType(f"bench_reading_{rev}")
    exec(compile(code, f"reading.py@{rev}", "exec"), module.__dict__)
    read = module.read_partition

    class BaselineStreamReader(KafkaStreamReader):
        def read(self, partition: Any) -> Any:  # type: ignore[override]
            return read(partition)

    class BaselineKafkaEos(KafkaEosDataSource):
        @classmethod
        def name(cls) -> str:
            return BASELINE

        def streamReader(self, schema: Any) -> Any:
            return BaselineStreamReader(schema, self.options)

    return BaselineKafkaEos


def register(spark: Any, baseline_rev: str | None = None) -> None:
    """Register ``kafka_eos_timed`` (and ``kafka_eos_baseline`` for a revision) with ``spark``."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(TimedKafkaEos)
    if baseline_rev:
        spark.dataSource.register(_baseline_source(baseline_rev))
