"""A partition retention job beside the pipelines writing a table, as users run one: every
few seconds it drops the table's old hours through the Hive metastore.

An hour is old when it is ``keep`` hours or more behind the newest hour the table's input
has reached. It is dropped only once no input record can still map to it: the inputs'
record timestamps rise with the offset in each input partition, so an hour is closed once,
in every partition of every input, the last committed record (the newest batch in a
checkpoint's commit log, whose files are final and published) is in a later hour. A
partition that committed nothing keeps every hour open; one whose input is closed and fully
committed keeps none. So a dropped partition never receives rows again, and a row found in
the table after its partition was dropped is the sink's doing, not the test's race.

Each partition's rows are read right before it is dropped (``removed``: what the audit
counts as written once and removed on purpose), then the partition is dropped with
``deleteData`` and its directory deleted (its objects, on S3) through a pyarrow file system
of the table's store (:func:`.table_audit.filesystem`): the table is external, whose files
the metastore leaves in place, so a retention job deletes them itself. A dropped partition found
registered again later is recorded (``back``), never dropped a second time: that is the
finding the audit must see (a dead query's batch published again, docs/dev/decisions.md,
"A dead query's batch is finished once").
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from confluent_kafka import Consumer, TopicPartition

from kafka_eos_ds.kafka.settings import logged
from kafka_eos_tools.demo import table_audit
from kafka_eos_tools.demo.table_chaos import CommittedInput, metastore_client

HOUR_MS = 3_600_000


@dataclass
class WatchedInput:
    """One pipeline's input topic as the retention job sees it."""

    topic: str
    partitions: int
    # Every checkpoint that has read this input so far: a new query (startingOffsetsFromTable)
    # adds its own, and the input's committed end is the furthest any of them reached.
    checkpoints: list[Path] = field(default_factory=list)
    closed: bool = False  # no more records will be written to the topic (set by the run)

    def committed(self) -> dict[int, int]:
        ends: dict[int, int] = {}
        for checkpoint in list(self.checkpoints):
            for (topic, part), end in CommittedInput(checkpoint).ends().items():
                if topic == self.topic:
                    ends[part] = max(ends.get(part, 0), end)
        return ends


def last_droppable_hour(lasts: Sequence[tuple[int | None, bool]], keep: int) -> int | None:
    """The newest hour retention may drop, or None.

    ``lasts``: per input partition, the hour of its last committed record (None: it committed
    nothing) and whether it is drained (its input closed and every record committed). The
    hours kept are the newest ``keep`` ones reached; a partition not drained keeps its last
    record's hour and every later one open (its next records are there or later)."""
    reached = [hour for hour, _drained in lasts if hour is not None]
    if not reached:
        return None
    last = max(reached) - keep
    for hour, drained in lasts:
        if drained:
            continue
        if hour is None:
            return None
        last = min(last, hour - 1)
    return last


def hour_of(values: dict[str, str]) -> int:
    """The hour (since the epoch, UTC) of a partition's ``dt`` and ``hour`` values."""
    stamp = datetime.strptime(f"{values['dt']} {values['hour']}", "%Y-%m-%d %H").replace(tzinfo=timezone.utc)
    return int(stamp.timestamp()) // 3600


class Retention(threading.Thread):
    """Drops the table's old hours every ``interval`` seconds until ``stop()``; the table's
    files are at ``location`` (``hdfs://``, ``s3a://``, with the sink's ``store_options``)."""

    def __init__(self, bootstrap: str, location: str, store_options: Mapping[str, str], metastore: str,
                 database: str, table: str, inputs: Sequence[WatchedInput], keep: int, interval: float = 3.0) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.metastore = bootstrap, metastore
        self.files = table_audit.filesystem(location, store_options)
        self.database, self.table, self.inputs, self.keep, self.interval = database, table, inputs, keep, interval
        self.dropped: list[str] = []  # partition names, in the order dropped
        self.removed: list[tuple[str, dict]] = []  # (partition, row) read right before each drop
        self.removed_files: list[str] = []  # "<partition>/<file name>"
        self.back: list[str] = []  # dropped partitions found registered again
        self.late_files: list[str] = []  # files found in a partition after its rows were read
        self.journal: list[str] = []  # what each pass saw and did, timed (the run writes it beside its logs)
        self.passes = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self._hours: dict[tuple[str, int, int], int] = {}  # (topic, partition, offset) -> hour
        self._lock = threading.Lock()  # one pass at a time: the thread's and sweep()'s

    def run(self) -> None:
        consumer = self._consumer()
        failures = 0
        try:
            while not self.stopping.wait(self.interval):
                try:
                    self.sweep(consumer)
                    failures = 0
                except Exception as exc:  # a metastore or broker call that failed once is tried again
                    failures += 1
                    if failures >= 5:
                        self.error = exc
                        return
        finally:
            consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(120)
        if self.error is not None:
            raise RuntimeError(f"the retention job failed: {self.error!r}") from self.error

    def sweep_now(self) -> int:
        """One pass from the caller's thread (the run's final sweeps); partitions dropped."""
        consumer = self._consumer()
        try:
            return self.sweep(consumer)
        finally:
            consumer.close()

    def sweep(self, consumer: Consumer) -> int:
        with self._lock:
            self.passes += 1
            lasts = self._lasts(consumer)
            last = last_droppable_hour(lasts, self.keep)
            self._note(f"pass {self.passes}: last hours {lasts}, droppable up to {last}")
            if last is None:
                return 0
            dropped = 0
            with metastore_client(self.metastore) as client:
                keys = [k.name for k in client.get_table(self.database, self.table).partitionKeys]
                for partition in client.get_partitions(self.database, self.table, -1):
                    values = dict(zip(keys, partition.values, strict=True))
                    name = table_audit.hive_name(values)
                    if name in self.dropped:
                        if name not in self.back:
                            self.back.append(name)
                    elif hour_of(values) <= last:
                        self._drop(client, name, partition)
                        dropped += 1
            return dropped

    def _drop(self, client: Any, name: str, partition: Any) -> None:
        rows = table_audit.partition_rows(self.files, partition.sd.location)
        client.drop_partition(self.database, self.table, partition.values, True)
        # A file that appeared after the read is a closed hour receiving rows: its rows
        # would be deleted uncounted (a loss the audit could not place). Named instead.
        read = {file for file, _row in rows}
        self.late_files += [f"{name}/{file}" for file in table_audit.partition_files(self.files,
                                                                                    partition.sd.location)
                            if file not in read]
        try:
            self.files.delete_dir(table_audit.path_of(partition.sd.location))
        except FileNotFoundError:
            pass  # a metastore that deletes an external table's data did it already
        self.dropped.append(name)
        per_file: dict[str, list[str]] = {}
        for file, row in rows:
            value = row.get("value")
            text = value.decode() if isinstance(value, bytes) else str(value)
            per_file.setdefault(file, []).append(text.split("|", 1)[0])
        for ids in per_file.values():
            ids.sort(key=lambda i: (len(i), i))  # decimal ids: "99" before "100"
        self._note(f"dropped {name}: " + ", ".join(f"{file} ({len(ids)} rows, ids {ids[0]}..{ids[-1]})"
                                                   for file, ids in sorted(per_file.items())))
        self.removed += [(name, row) for _file, row in rows]
        self.removed_files += sorted({f"{name}/{file}" for file, _row in rows})

    def _note(self, line: str) -> None:
        self.journal.append(f"{datetime.now(timezone.utc).strftime('%H:%M:%S.%f')[:-3]} {line}")

    def _lasts(self, consumer: Consumer) -> list[tuple[int | None, bool]]:
        lasts = []
        for watched in self.inputs:
            closed = watched.closed  # read before the ends: a topic reopened meanwhile counts as open
            committed = watched.committed()
            highs = self._high_watermarks(consumer, watched) if closed else {}
            for part in range(watched.partitions):
                end = committed.get(part, 0)
                drained = closed and end >= highs[part]
                lasts.append((self._hour_at(consumer, watched.topic, part, end - 1) if end > 0 else None, drained))
        return lasts

    def _high_watermarks(self, consumer: Consumer, watched: WatchedInput) -> dict[int, int]:
        return {part: consumer.get_watermark_offsets(TopicPartition(watched.topic, part), timeout=10,
                                                     cached=False)[1] for part in range(watched.partitions)}

    def _hour_at(self, consumer: Consumer, topic: str, part: int, offset: int) -> int:
        """The hour of the record at ``offset`` (its Kafka timestamp, what the pipeline
        partitions by)."""
        key = (topic, part, offset)
        if key not in self._hours:
            consumer.assign([TopicPartition(topic, part, offset)])
            deadline = time.monotonic() + 30
            while key not in self._hours:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"could not read {topic}-{part} at offset {offset}")
                for msg in consumer.consume(1, 1.0):
                    if msg.error() is None and msg.offset() == offset:
                        self._hours[key] = msg.timestamp()[1] // HOUR_MS
        return self._hours[key]

    def _consumer(self) -> Consumer:
        return Consumer(logged({"bootstrap.servers": self.bootstrap, "group.id": "kafka-eos-retention",
                                "enable.auto.commit": False}))
