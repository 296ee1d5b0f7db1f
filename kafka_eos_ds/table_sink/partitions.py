"""Partitioned tables: from the option ``partitionBy`` to the directory each row goes to.

``partitionBy`` lists the table's partition columns, outermost first. Each item is

* a column of the DataFrame (``dt``): its values name the directories and, as with
  Spark's ``partitionBy``, the column leaves the files (readers get it back from the
  path); string, integer, boolean and date columns;
* ``name=fn(column)``, a time bucket (``dt=date(event_time)``, ``hour=hour(event_time)``;
  ``fn`` one of ``year`` ``month`` ``date`` ``hour``) of a timestamp or date column, in
  the time zone ``partitionTimeZone`` (default UTC); the column stays in the files.

Directory names are Hive's: ``name=value``, with the characters Hive escapes written
``%XX`` and a null value as ``__HIVE_DEFAULT_PARTITION__``, so Spark, Hive and Arrow read
them back. Spark's own ``DataFrameWriter.partitionBy`` does not reach a Python data
source (pyspark 4.3 drops it for streams and refuses it for batch writes), hence the option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from kafka_eos_ds.errors import ConfigError

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Time buckets: strftime format, and whether a date column can be bucketed so.
BUCKETS = {"year": ("%Y", True), "month": ("%Y-%m", True), "date": ("%Y-%m-%d", True), "hour": ("%H", False)}
_PLAIN_TYPES = ("string", "tinyint", "smallint", "int", "bigint", "boolean", "date")
_TIME_TYPES = ("timestamp", "timestamp_ntz", "date")
_ITEM = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(=\s*(?P<fn>[a-z]+)\s*\(\s*(?P<col>[^()\s]+)\s*\))?\s*$")
# Spark's ExternalCatalogUtils.escapePathName: control characters and these.
_ESCAPED = frozenset(chr(c) for c in range(1, 32)) | frozenset('"#%\'*/:=?\\\x7f{[]^')
_EXAMPLE = ".option('partitionBy', 'dt,hour') or .option('partitionBy', 'dt=date(event_time),hour=hour(event_time)')"


@dataclass(frozen=True)
class PartitionColumn:
    """One level of directories: ``name`` from ``source``'s values, or its time ``bucket``."""

    name: str
    source: str
    bucket: str | None = None
    hive_type: str = "string"
    instant: bool = True  # a bucketed timestamp is an instant (Spark's TIMESTAMP), not a local time


@dataclass(frozen=True)
class Partitioning:
    columns: tuple[PartitionColumn, ...] = ()
    time_zone: str = "UTC"

    @classmethod
    def parse(cls, text: str | None, time_zone: str | None, schema: Any) -> "Partitioning":
        """Check ``partitionBy`` against the DataFrame's schema (a Spark StructType; None
        when unknown: columns are then taken as named)."""
        zone = (time_zone or "UTC").strip()
        _check_zone(zone)
        if not text or not text.strip():
            return cls((), zone)
        types = {f.name.lower(): (f.name, f.dataType.simpleString()) for f in schema.fields} if schema else {}
        columns: list[PartitionColumn] = []
        for item in text.split(","):
            m = _ITEM.match(item)
            if m is None:
                raise ConfigError(f"Option 'partitionBy': cannot read {item.strip()!r}; name columns or time "
                                  f"buckets, e.g. {_EXAMPLE}.")
            columns.append(_column(m["name"], m["fn"], m["col"], types))
        names = [c.name.lower() for c in columns]
        if len(set(names)) != len(names):
            raise ConfigError(f"Option 'partitionBy' names a partition column twice ({text!r}).")
        if types and len({c.source.lower() for c in columns if c.bucket is None}) == len(types):
            raise ConfigError("Option 'partitionBy' names every column of the DataFrame: the files would have no "
                              "column left. Keep at least one column out of 'partitionBy'.")
        return cls(tuple(columns), zone)

    @property
    def plain(self) -> set[str]:
        """The columns that leave the files (their values are in the path)."""
        return {c.source for c in self.columns if c.bucket is None}

    def split(self, batch: Any) -> list[tuple[str, Any]]:
        """``batch`` (a ``pyarrow.RecordBatch``) as ``(directory, rows)`` per partition, in
        the order each partition first appears; the rows keep their order and lose the
        plain partition columns."""
        import numpy as np
        import pyarrow as pa

        keep = [i for i, name in enumerate(batch.schema.names) if name not in self.plain]
        if not self.columns:
            return [("", batch)]
        codes = np.zeros(batch.num_rows, dtype=np.int64)
        dictionaries: list[list[str]] = []
        for column in self.columns:
            encoded = self._values(column, batch.column(batch.schema.get_field_index(column.source)))
            encoded = encoded.dictionary_encode()
            dictionary = [_escape(v) for v in encoded.dictionary.to_pylist()]
            codes = codes * (len(dictionary) + 1) + np.asarray(encoded.indices.to_numpy(zero_copy_only=False),
                                                              dtype=np.int64)
            dictionaries.append(dictionary)
        order = np.argsort(codes, kind="stable")
        data = batch.select(keep)
        if codes.size and codes[order[0]] == codes[order[-1]]:  # one partition: no copy
            groups = [(0, batch.num_rows, int(codes[0]))]
            rows_in = [data]
        else:
            ordered = data.take(pa.array(order))
            sorted_codes = codes[order]
            bounds = [0, *(np.flatnonzero(np.diff(sorted_codes)) + 1).tolist(), batch.num_rows]
            groups = [(start, end, int(sorted_codes[start])) for start, end in zip(bounds, bounds[1:], strict=False)]
            unique, first_rows = np.unique(codes, return_index=True)
            first = dict(zip(unique.tolist(), first_rows.tolist(), strict=True))
            groups.sort(key=lambda g: first[g[2]])
            rows_in = [ordered.slice(start, end - start) for start, end, _ in groups]
        return [(self._directory(code, dictionaries), rows) for (_, _, code), rows in zip(groups, rows_in, strict=True)]

    def _values(self, column: PartitionColumn, array: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        if column.bucket is None:
            text = pc.cast(array, pa.string())
        else:
            if pa.types.is_timestamp(array.type):
                if array.type.tz is None and column.instant:
                    array = array.cast(pa.timestamp(array.type.unit, tz="UTC"))
                if array.type.tz is not None:
                    array = array.cast(pa.timestamp(array.type.unit, tz=self.time_zone))
            text = pc.strftime(array, format=BUCKETS[column.bucket][0])
        # Hive and Spark put a null and an empty value in the same default partition.
        text = pc.fill_null(text, DEFAULT_PARTITION)
        return pc.if_else(pc.equal(text, ""), DEFAULT_PARTITION, text)

    def _directory(self, code: int, dictionaries: Sequence[list[str]]) -> str:
        values: list[str] = []
        for dictionary in reversed(dictionaries):
            code, index = divmod(code, len(dictionary) + 1)
            values.append(dictionary[index])
        return "/".join(f"{c.name}={v}" for c, v in zip(self.columns, reversed(values), strict=True))


def values_of(directory: str) -> list[str]:
    """The partition values a directory (``a=1/b=x``) stands for, unescaped."""
    return [_unescape(part.split("=", 1)[1]) for part in directory.split("/") if part]


def _column(name: str, fn: str | None, source: str | None, types: dict[str, tuple[str, str]]) -> PartitionColumn:
    if fn is None:
        found = types.get(name.lower())
        if types and found is None:
            raise ConfigError(f"Option 'partitionBy' names column {name!r}, which the DataFrame does not have "
                              f"(its columns: {', '.join(n for n, _ in types.values())}).")
        actual, kind = found or (name, "string")
        if kind not in _PLAIN_TYPES:
            raise ConfigError(f"Option 'partitionBy': column {actual!r} is {kind}; partition by a string, integer, "
                              f"boolean or date column, or bucket a time: e.g. 'dt=date({actual})'.")
        return PartitionColumn(actual, actual, None, kind)
    if fn not in BUCKETS:
        raise ConfigError(f"Option 'partitionBy': {fn!r} is not a time bucket; use one of {', '.join(BUCKETS)}, "
                          f"e.g. {_EXAMPLE}.")
    assert source is not None
    found = types.get(source.lower())
    if types and found is None:
        raise ConfigError(f"Option 'partitionBy': {name}={fn}({source}) names column {source!r}, which the "
                          "DataFrame does not have.")
    if types and name.lower() in types:
        raise ConfigError(f"Option 'partitionBy': {name}={fn}({source}) would hide the DataFrame's column "
                          f"{name!r}; give the partition another name.")
    actual, kind = found or (source, "timestamp")
    if kind not in _TIME_TYPES or (kind == "date" and not BUCKETS[fn][1]):
        wanted = "a timestamp" if fn == "hour" else "a timestamp or date"
        raise ConfigError(f"Option 'partitionBy': {fn}({actual}) needs {wanted} column; {actual!r} is {kind}.")
    return PartitionColumn(name, actual, fn, "string", instant=kind == "timestamp")


def _check_zone(zone: str) -> None:
    try:
        from zoneinfo import ZoneInfo

        ZoneInfo(zone)
    except Exception:
        raise ConfigError(f"Option 'partitionTimeZone' = {zone!r} is not a time zone; use an IANA name such as "
                          "'UTC' or 'Europe/Berlin'.") from None


def _escape(value: str) -> str:
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in value)


def _unescape(value: str) -> str:
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), value)
