"""The Python data source :mod:`kafka_eos_tools.jvm_archive` runs its warm-up queries with:
a few rows of Kafka's shape, read in a batch and in a stream, written back and dropped, so
that the driver JVM loads the classes a kafka_eos pipeline loads (Python data source
planning, streaming micro-batches, Arrow hand-overs). Its own module: Spark's Python
workers import it by name."""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

ROWS = 100
BATCHES = 2


class WarmUpSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kafka_eos_warm_up"

    def schema(self) -> str:
        return "key string, value binary"

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader()

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return _Writer()

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return _StreamWriter()


def _rows(start: int, end: int) -> Iterator[tuple]:
    for n in range(start, end):
        yield (f"k{n % 7}", f"v{n}".encode())


class _Reader(DataSourceReader):
    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return _rows(0, ROWS)


class _Range(InputPartition):
    def __init__(self, start: int, end: int):
        super().__init__(None)
        self.start, self.end = start, end


class _StreamReader(DataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self, *args: Any) -> dict:  # (start, limit) on the lines with read limits
        return {"n": ROWS * BATCHES}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        middle = (start["n"] + end["n"]) // 2
        return [_Range(start["n"], middle), _Range(middle, end["n"])]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, _Range)
        return _rows(partition.start, partition.end)

    def commit(self, end: dict) -> None:
        pass


def _drop(rows: Iterator[Any]) -> WriterCommitMessage:
    for _ in rows:
        pass
    return WriterCommitMessage()


class _Writer(DataSourceWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _drop(iterator)


class _StreamWriter(DataSourceStreamWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _drop(iterator)

    def commit(self, messages: list, batchId: int) -> None:
        pass

    def abort(self, messages: list, batchId: int) -> None:
        pass
