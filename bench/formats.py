"""Bench-only formats registered next to ``kafka_eos``; the connector itself is unchanged.

* ``kafka_eos_timed``: the kafka_eos sink with its per-batch driver commit timed. Same
  writers; each ``commit()`` call (what Spark's commit process runs once per batch: read
  the latest decision, write ``decided``, end every task's transaction, write ``done``)
  appends its duration and task count as a JSON line to the file named by the option
  ``benchCommitLog``. The built-in sink has no such step (its tasks' writes are final).
* ``kafka_eos_file_timed``: the ``kafka_eos_file`` sink with the same steps timed
  (planner, tasks, driver commit: renaming the batch's pending files to their final names).
* ``kafka_eos_baseline``: the kafka_eos source reading with ``reading.py`` as it was at a
  git revision (``--baseline-read REV``), for before/after measurements in one run.
* ``python_noop``: a Python streaming sink that drains its input the way kafka_eos_file's
  tasks receive it (Arrow batches from pyspark 4.1) and writes nothing: what any Python
  data source sink pays per batch (the hand-over to Python workers, the driver's commit
  call), the floor under kafka_eos_file in the table workloads.

Both classes are pickled by value so Spark's Python workers need not import this module.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from pyspark.sql.datasource import DataSource

from kafka_eos_ds.datasource import KafkaEosDataSource
from kafka_eos_ds.source.stream_reader import KafkaStreamReader
from kafka_eos_ds.table_sink.datasource import KafkaEosFileDataSource
from kafka_eos_ds.twophase.writers import StreamWriterBase

TIMED = "kafka_eos_timed"
TIMED_FILE = "kafka_eos_file_timed"
BASELINE = "kafka_eos_baseline"
NOOP = "python_noop"
COMMIT_LOG_OPTION = "benchCommitLog"
REPO = Path(__file__).resolve().parents[2]


def _option(options: Mapping[str, Any], name: str) -> Any:
    return next((v for k, v in options.items() if k.lower() == name.lower()), None)


class TimedSink:
    """The sink's steps timed, one JSON line per step to the ``benchCommitLog`` file:
    ``prepare`` (the planner's check and recovery, once per batch), ``task`` (one task's
    write, with the part spent waiting for input rows: in a pipeline, the source's read)
    and ``commit`` (the driver's commit)."""

    def __init__(self, sink: Any, bench_log: Any) -> None:
        self.sink = sink
        self._bench_log = bench_log

    @property
    def message_type(self) -> type:
        return self.sink.message_type  # type: ignore[no-any-return]

    def _record(self, step: str, started: float, **extra: Any) -> None:
        if self._bench_log:
            with open(self._bench_log, "a") as fh:
                fh.write(json.dumps({"step": step, "seconds": time.perf_counter() - started, **extra}) + "\n")

    def prepare(self, spec: Any) -> Any:
        started = time.perf_counter()
        mark = self.sink.prepare(spec)
        self._record("prepare", started)
        return mark

    def write(self, task: Any, mark: Any, iterator: Any) -> Any:
        started, waited = time.perf_counter(), [0.0]

        def rows() -> Any:
            it = iter(iterator)
            while True:
                t = time.perf_counter()
                try:
                    item = next(it)
                except StopIteration:
                    waited[0] += time.perf_counter() - t
                    return
                waited[0] += time.perf_counter() - t
                yield item

        message = self.sink.write(task, mark, rows())
        self._record("task", started, input_s=waited[0])
        return message

    def commit(self, write: Any, participants: Any) -> None:
        started = time.perf_counter()
        self.sink.commit(write, participants)
        self._record("commit", started, tasks=len(participants))

    def abort(self, write: Any, participants: Any, spec: Any) -> None:
        self.sink.abort(write, participants, spec)


class _TimedWriters:
    """A sink's data source with its writers' steps timed (:class:`TimedSink`)."""

    def _timed(self, writer: Any) -> Any:
        options = self.options  # type: ignore[attr-defined]  # the DataSource's
        writer.sink = TimedSink(writer.sink, _option(options, COMMIT_LOG_OPTION))
        return writer

    def writer(self, schema: Any, overwrite: bool) -> Any:
        return self._timed(super().writer(schema, overwrite))  # type: ignore[misc]

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return self._timed(super().streamWriter(schema, overwrite))  # type: ignore[misc]


class TimedKafkaEos(_TimedWriters, KafkaEosDataSource):
    @classmethod
    def name(cls) -> str:
        return TIMED


class TimedKafkaEosFile(_TimedWriters, KafkaEosFileDataSource):
    @classmethod
    def name(cls) -> str:
        return TIMED_FILE


class _NoopStreamWriter(StreamWriterBase):  # type: ignore[misc, valid-type]
    def write(self, iterator: Any) -> Any:
        from pyspark.sql.datasource import WriterCommitMessage

        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: Any, batchId: int) -> None:
        pass

    def abort(self, messages: Any, batchId: int) -> None:
        pass


class PythonNoop(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return NOOP

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return _NoopStreamWriter()


class CommitLog:
    """A fresh file per run for ``benchCommitLog``; ``steps()`` reads what the steps wrote."""

    def __init__(self) -> None:
        self.path = tempfile.mkstemp(prefix="bench-commits-", suffix=".jsonl")[1]

    def steps(self) -> list[dict]:
        lines = Path(self.path).read_text().splitlines()
        Path(self.path).unlink(missing_ok=True)
        return [json.loads(line) for line in lines if line.strip()]

    def add_to(self, target: Any) -> None:
        """Append what the steps wrote to ``target``'s lists: ``task_s`` and ``task_input_s``
        per task, ``prepare_s`` and ``commit_s`` per batch."""
        for step in self.steps():
            if step["step"] == "task":
                target.task_s.append(step["seconds"])
                target.task_input_s.append(step["input_s"])
            else:
                {"commit": target.commit_s, "prepare": target.prepare_s}[step["step"]].append(step["seconds"])


def _baseline_source(rev: str) -> type:
    """A data source whose stream reader reads with ``reading.py`` at git revision ``rev``."""
    import types

    code = subprocess.run(["git", "show", f"{rev}:kafka_eos_ds/source/reading.py"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout
    module = types.ModuleType(f"bench_reading_{rev}")
    exec(compile(code, f"reading.py@{rev}", "exec"), module.__dict__)
    read = module.read_partition

    class BaselineStreamReader(KafkaStreamReader):
        def partitions(self, start: Any, end: Any) -> Any:
            # Revisions before the grouped plan read one range per task, from ``range``.
            from kafka_eos_ds.source.planning import KafkaInputPartition

            singles = []
            for part in super().partitions(start, end):
                for r in part.ranges:
                    single = KafkaInputPartition((r,), part.config)
                    single.range = r  # type: ignore[attr-defined]
                    singles.append(single)
            return singles

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
    """Register ``kafka_eos_timed``, ``kafka_eos_file_timed``, ``python_noop`` (and ``kafka_eos_baseline``
    for a revision) with ``spark``."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(TimedKafkaEos)
    spark.dataSource.register(TimedKafkaEosFile)
    spark.dataSource.register(PythonNoop)
    if baseline_rev:
        spark.dataSource.register(_baseline_source(baseline_rev))
