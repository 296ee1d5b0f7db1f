"""Arrow batches -> the bytes of one Parquet or JSON-lines file, written into an output
the store gives (:class:`~kafka_eos_ds.storage.Output`: a local file, an HDFS file, an S3
multipart upload).

Spark hands a task ``pyarrow.RecordBatch``es (pyspark >= 4.1) or rows (4.0, gathered
into batches here). The output is opened at the first row, so an empty file is never
created.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any, Callable, Iterable, Iterator

from kafka_eos_ds.storage import Output


class FileEncoder:
    """One file being written: ``write_batch`` as rows arrive, then ``finish`` (complete
    and durable: the output's ``close``) or ``discard``."""

    def __init__(self, file_format: str, open_output: Callable[[], Output]) -> None:
        self.file_format = file_format
        self.records = 0
        self._open_output = open_output
        self._output: Any = None
        self._parquet: Any = None

    @property
    def opened(self) -> bool:
        return self._output is not None

    def write_batch(self, batch: Any) -> None:
        if batch.num_rows == 0:
            return
        if self._output is None:
            self._output = self._open_output()
        if self.file_format == "parquet":
            import pyarrow.parquet as pq

            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._output, batch.schema)
            self._parquet.write_batch(batch)
        else:
            lines = (json.dumps(row, default=_json_value, ensure_ascii=False) for row in batch.to_pylist())
            self._output.write(("\n".join(lines) + "\n").encode("utf-8"))
        self.records += batch.num_rows

    def finish(self) -> None:
        self._close(finish=True)

    def discard(self) -> None:
        self._close(finish=False)

    def _close(self, finish: bool) -> None:
        parquet, self._parquet = self._parquet, None
        output, self._output = self._output, None
        try:
            if parquet is not None:
                parquet.close()  # writes the footer; leaves our output open
        finally:
            if output is not None:
                output.close() if finish else output.discard()


def record_batches(items: Iterable[Any], spark_schema: Any) -> Iterator[Any]:
    """Spark's Arrow batches as they come; rows (pyspark 4.0) gathered into batches."""
    rows: list[dict[str, Any]] = []
    for item in items:
        if hasattr(item, "num_columns"):
            yield item
        else:
            rows.append(item.asDict(recursive=True) if hasattr(item, "asDict") else item)
            if len(rows) >= 10_000:
                yield _to_batch(rows, spark_schema)
                rows = []
    if rows:
        yield _to_batch(rows, spark_schema)


def _to_batch(rows: list[dict[str, Any]], spark_schema: Any) -> Any:
    import inspect

    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import TimestampType

    # Spark's TIMESTAMP is an instant: Arrow's is in UTC here. Newer pysparks ask for the
    # zone (and refuse a timestamp column without one); older ones always used UTC.
    zoned = "timezone" in inspect.signature(to_arrow_schema).parameters
    schema = to_arrow_schema(spark_schema, timezone="UTC") if zoned else to_arrow_schema(spark_schema)
    instants = [f.name for f in spark_schema.fields if isinstance(f.dataType, TimestampType)]
    for row in rows if instants else ():
        for name in instants:
            value = row.get(name)
            if isinstance(value, datetime.datetime):
                # A Row holds a TIMESTAMP as the Python worker's local time (naive):
                # astimezone reads a naive value as local time, an aware one as itself.
                row[name] = value.astimezone(datetime.timezone.utc)
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def _json_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")  # as Spark's JSON writer does
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
