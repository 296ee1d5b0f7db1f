"""The streaming reader: offsets per trigger, admission control, planning, lag commits.

Spark keeps one driver-side instance per source per query run (in a long-lived Python
worker) for ``initialOffset``/``latestOffset``/``partitions``/``commit``; executors get a
pickled copy for ``read`` only, so driver clients are created lazily and never pickled.
``stop()`` may never be called, so nothing depends on it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterator, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kafka_eos_ds.source import offsets as offsets_json
from kafka_eos_ds.source.group_commit import GroupOffsetCommitter
from kafka_eos_ds.source.metadata import KafkaMetadata
from kafka_eos_ds.source.offsets import Offsets
from kafka_eos_ds.source.options import SourceOptions
from kafka_eos_ds.source.planning import input_partitions
from kafka_eos_ds.source.positions import resolve
from kafka_eos_ds.source.reading import read_partition
from kafka_eos_ds.source.schema import check_schema

try:  # pyspark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # older pyspark: no admission control, no AvailableNow for Python sources
    ReadAllAvailable = ReadMaxRows = ReadMinRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

log = logging.getLogger(__name__)


def limit_offsets(start: Offsets, latest: Offsets, max_records: int) -> Offsets:
    """Spread ``max_records`` over partitions in proportion to their backlog (largest remainder)."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    shares = {tp: max_records * size / total for tp, size in backlog.items()}
    take = {tp: int(share) for tp, share in shares.items()}
    left = max_records - sum(take.values())
    for tp in sorted(shares, key=lambda tp: (take[tp] - shares[tp], tp))[:left]:
        take[tp] += 1
    return {tp: (start[tp] + take[tp] if tp in start else latest[tp]) for tp in latest}


_said: list[bool] = []


def _say_once_limits_are_the_readers() -> None:
    if _said:
        return
    _said.append(True)
    import pyspark

    log.warning("pyspark %s passes no read limits to Python sources (from 4.2 it does): kafka_eos applies "
                "maxOffsetsPerTrigger/minOffsetsPerTrigger itself, and Trigger.AvailableNow runs a single "
                "batch per run on this line (bounded by maxOffsetsPerTrigger). See docs/source.md.",
                pyspark.__version__)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reads of Kafka topics, drop-in for Spark's built-in ``format("kafka")``.

    Options
    -------
    kafka.bootstrap.servers : str
        Brokers, ``host:port,...`` (required). Every ``kafka.*`` option goes to librdkafka.
    subscribe, subscribePattern, assign : str
        Exactly one: topic list, topic regex, or JSON ``{"topic": [0, 1]}``.
    startingOffsets : str
        ``latest`` (default), ``earliest``, ``group`` or JSON ``{"topic": {"0": 23}}`` (-2/-1 =
        earliest/latest). Only used when the query starts without a checkpoint.
    startingTimestamp, startingOffsetsByTimestamp, startingOffsetsByTimestampStrategy
        Start by record timestamp (epoch ms), as in Spark's built-in source.
    maxOffsetsPerTrigger, minOffsetsPerTrigger, maxTriggerDelay
        Admission control per micro-batch (Spark's read limits from pyspark 4.2; applied
        by the reader itself on 4.0 and 4.1).
    failOnDataLoss : bool
        Fail (default) or warn and skip when offsets vanished.
    includeHeaders : bool
        Add the ``headers`` column.
    kafka.isolation.level : str
        ``read_committed`` (default here) or ``read_uncommitted``.
    groupIdPrefix, kafka.group.id, commitOffsetsToGroup
        The consumer group the consumed offsets are committed to after every batch (on by
        default) so lag tools see the query's progress.

    The keyword ``metadata_factory`` (``KafkaMetadata`` by default) builds the driver's
    metadata client from the options; unit tests pass a fake.

    Notes
    -----
    Offsets are the Spark checkpoint's; the group commit is for monitoring only and is
    best effort. See ``docs/source.md``.

    Examples
    --------
    >>> df = (spark.readStream.format("kafka_eos")
    ...       .option("kafka.bootstrap.servers", "localhost:9092")
    ...       .option("subscribe", "orders").load())
    """

    def __init__(self, schema: StructType, options: dict[str, str], *,
                 metadata_factory: Callable[[SourceOptions], KafkaMetadata] = KafkaMetadata) -> None:
        self.options = SourceOptions.from_spark(options, streaming=True)
        check_schema(schema, self.options.include_headers)
        if ReadAllAvailable is None:
            _say_once_limits_are_the_readers()
        self._metadata_factory = metadata_factory
        self._metadata: KafkaMetadata | None = None
        self._committer = GroupOffsetCommitter(self.options.group_id)
        self._target: Offsets | None = None
        self._initial: Offsets | None = None
        self._latest: Offsets | None = None
        self._current: Offsets | None = None
        self._last_batch_at = time.monotonic()
        self._group_committed: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors need only the options; driver clients cannot be pickled.
        state = dict(self.__dict__)
        state["_metadata"] = None
        return state

    @property
    def metadata(self) -> KafkaMetadata:
        if self._metadata is None:
            self._metadata = self._metadata_factory(self.options)
        return self._metadata

    # -- offsets -----------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        # Resolved once per run: pyspark < 4.2 asks for it after the first latestOffset()
        # too, and a second "latest" would start the first batch past its planned end.
        if self._initial is None:
            parts = self.metadata.partitions()
            self._initial = resolve(self.options.starting, parts, self.metadata, "startingOffsets")
        if self._current is None:
            self._current = self._initial
        return offsets_json.to_json(self._initial)

    def getDefaultReadLimit(self) -> Any:
        if ReadAllAvailable is None:
            return None
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        if start is not None:
            begin = offsets_json.from_json(start)
            self._current = begin
            # Spark asks for the next batch's end only after the batch ending at
            # ``start`` has completed, and calls commit() for it only once a further
            # batch starts; committing here keeps the group's lag current when idle.
            self._commit_to_group(begin)
        elif self._current is not None:
            begin = self._current
        else:  # pyspark < 4.2, first trigger of a new query
            begin = offsets_json.from_json(self.initialOffset())
        known = set(begin)
        parts = self.metadata.partitions()
        latest = self.metadata.latest(parts)
        new = parts - known
        if new:
            # New partitions are read from their earliest offset.
            begin = {**begin, **self.metadata.earliest(new)}
        if self._target is not None:
            latest = {tp: min(off, self._target[tp]) for tp, off in latest.items() if tp in self._target}
            # Partitions that appeared after the target was taken are not read in this run.
            for tp in (known & parts) - set(latest):
                latest[tp] = begin[tp]
            begin = {tp: off for tp, off in begin.items() if tp in latest}
        self._latest = latest
        end = self._admit(begin, latest, limit)
        if end != begin:
            self._last_batch_at = time.monotonic()
        self._current = end
        return offsets_json.to_json(end)

    def _admit(self, begin: Offsets, latest: Offsets, limit: Any) -> Offsets:
        # pyspark < 4.2 passes no read limit (ReadAllAvailable is None there): the reader
        # applies its own options, from the end it returned or Spark last planned.
        limits_given = ReadAllAvailable is not None
        all_available = limits_given and (limit is None or isinstance(limit, ReadAllAvailable))
        if all_available and (self._target is None or self.options.max_offsets_per_trigger is None):
            return latest
        opts = self.options
        if opts.min_offsets_per_trigger is not None and self._target is None:
            available = sum(max(0, off - begin.get(tp, off)) for tp, off in latest.items())
            waited_ms = (time.monotonic() - self._last_batch_at) * 1000
            if available < opts.min_offsets_per_trigger and waited_ms < opts.max_trigger_delay_ms:
                # Not enough yet: returning the start offsets means "no new batch".
                return dict(self._current) if self._current is not None else dict(begin)
        max_rows = opts.max_offsets_per_trigger
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        if max_rows is None:
            return latest
        return limit_offsets(begin, latest, max_rows)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_json.to_json(self._latest) if self._latest is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        parts = self.metadata.partitions()
        self._target = self.metadata.latest(parts)

    # -- planning and reading ----------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = offsets_json.from_json(start), offsets_json.from_json(end)
        # The next batch starts here. On a restart Spark announces the offset log's
        # latest end by planning it as an empty range (partitions(end, end)) before it
        # asks for the latest offset; pyspark < 4.2 tells the reader nothing else.
        self._current = finish
        earliest = self.metadata.earliest(set(finish) & self.metadata.partitions())
        return input_partitions(self.options, begin, finish, earliest)

    def read(self, partition: InputPartition) -> Iterator[Any]:  # type: ignore[override]
        return read_partition(partition)  # type: ignore[arg-type]

    # -- after a batch -----------------------------------------------------------------
    def commit(self, end: dict[str, Any]) -> None:
        self._commit_to_group(offsets_json.from_json(end))

    def _commit_to_group(self, offsets: Offsets) -> None:
        if not self.options.commit_offsets_to_group or offsets == self._group_committed:
            return
        if self._committer.commit(self.metadata.consumer(), offsets):
            self._group_committed = dict(offsets)

    def stop(self) -> None:
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None
