"""The measured workloads. Each function runs one variant once and returns its ``Timing``.

All Spark variants run in one SparkSession (one JVM with the built-in connector's jars
and kafka_eos registered), alternated A/B/A/B by the runner so machine drift affects
every variant alike. Raw-client ceilings run in plain child processes (no Spark).
kafka_eos's exactly-once sink runs as ``kafka_eos_timed`` (the same writers with the
driver commit timed, see :mod:`bench.formats`) when given a ``CommitLog``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

from bench.formats import COMMIT_LOG_OPTION, NOOP, CommitLog

BUILTIN = "kafka"
EOS = "kafka_eos"


@dataclass(frozen=True)
class Timing:
    seconds: float                        # wall clock: query or job start to its end
    in_batches: float | None = None       # streaming: the sum of the micro-batches' trigger time
    batch_ms: dict | None = None          # streaming: Spark's durationMs steps, one value per micro-batch


def _streaming(query, started: float) -> Timing:
    """Wait for an AvailableNow query; the time in its batches excludes the per-query start
    (for a Python source, Spark starts a fresh Python process for the driver-side reader)."""
    query.awaitTermination()
    seconds = time.perf_counter() - started
    batches = [p["durationMs"] for p in query.recentProgress if p["numInputRows"] > 0]
    return Timing(seconds, sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress) / 1000,
                  {name: [d[name] for d in batches if name in d] for name in {n for d in batches for n in d}})


def _reader(spark, fmt: str, bootstrap: str, topic: str, max_offsets: int | None = None,
            options: dict | None = None):
    # read_committed for both connectors (kafka_eos's default), so both do the same work.
    reader = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed"))
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    for k, v in (options or {}).items():
        reader = reader.option(k, str(v))
    return reader.load()


def _eos_options(writer, fmt: str, commits: CommitLog | None, guarantee: str = "exactly_once"):
    """The kafka_eos sink's own options (a fresh transactional-id prefix per run)."""
    if fmt == BUILTIN:
        return writer
    writer = writer.option("deliveryGuarantee", guarantee).option("transactionalIdPrefix",
                                                                  f"bench-{uuid.uuid4().hex[:8]}")
    return writer.option(COMMIT_LOG_OPTION, commits.path) if commits else writer


def source_read(spark, fmt: str, bootstrap: str, topic: str, **_) -> Timing:
    """Read the whole topic with Trigger.AvailableNow into Spark's noop sink."""
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as ckpt:
        started = time.perf_counter()
        query = (_reader(spark, fmt, bootstrap, topic).writeStream.format("noop")
                 .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        return _streaming(query, started)


def sink_write(spark, fmt: str, bootstrap: str, records: int, size: int, out_topic: str,
               guarantee: str = "exactly_once", partitions: int = 4, commits: CommitLog | None = None,
               columns: str = "key,value", **_) -> Timing:
    """Write ``records`` generated rows as a batch job: ``columns`` of key (1-3 bytes),
    value (``size`` bytes) and headers (one 'trace' header of ~8 bytes)."""
    exprs = {"key": "cast(id % 1000 as string) as key",
             "value": f"concat(cast(id as string), '|', repeat('x', {max(size - 12, 1)})) as value",
             "headers": "array(named_struct('key', 'trace', 'value', cast(cast(id as string) as binary))) as headers"}
    df = spark.range(0, records, 1, partitions).selectExpr(*(exprs[c] for c in columns.split(",")))
    # Python data sources accept only append/overwrite save modes (a Spark rule).
    writer = df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
    writer = _eos_options(writer, fmt, commits, guarantee)
    started = time.perf_counter()
    writer.save()
    return Timing(time.perf_counter() - started)


def pipeline(spark, fmt: str, bootstrap: str, topic: str, out_topic: str, max_offsets: int,
             commits: CommitLog | None = None, source: str | None = None, guarantee: str = "exactly_once",
             source_options: dict | None = None, coalesce: int | None = None, **_) -> Timing:
    """Kafka -> Spark -> Kafka with AvailableNow in batches of ``max_offsets`` records:
    kafka_eos source into the kafka_eos sink (exactly-once, or ``guarantee``), or the
    built-in source into the built-in (at-least-once) sink; ``source`` overrides the
    source (the floors: either source into a Python sink that writes nothing);
    ``source_options`` are the source's (e.g. kafka_eos's plan), ``coalesce`` groups the
    loaded rows into that many tasks (``.coalesce(n)`` after ``load()``)."""
    source = source or (EOS if fmt != BUILTIN else BUILTIN)
    df = _reader(spark, source, bootstrap, topic, max_offsets, source_options)
    if coalesce:
        df = df.coalesce(coalesce)
    df = df.selectExpr("key", "value")
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as ckpt:
        writer = (df.writeStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                  .option("topic", out_topic).option("checkpointLocation", ckpt).trigger(availableNow=True))
        writer = _eos_options(writer, fmt, commits, guarantee)
        started = time.perf_counter()
        return _streaming(writer.start(), started)


# The table workloads: the same micro-batches of the same topic, read by the built-in
# source for both sinks (the sink is what differs; the kafka_eos source's cost is the
# source and pipeline workloads'), written as Parquet under a fresh local directory.
PARQUET = "parquet"
PARTITION_COLUMN = "dt"
PARTITION_VALUES = 4  # dt: 4 dates, from the key (keys are i % 1000)


def table_write(spark, fmt: str, bootstrap: str, topic: str, records: int, max_offsets: int,
                partitioned: bool = False, commits: CommitLog | None = None, **_) -> Timing:
    """Kafka -> Spark -> a Parquet table with AvailableNow in batches of ``max_offsets``
    records: kafka_eos_file (as ``kafka_eos_file_timed`` with ``commits``) or Spark's file
    sink (``parquet``, its ``_spark_metadata`` log), optionally into Hive-style
    ``dt=YYYY-MM-DD`` directories. The table is read back after the clock stops: a run
    whose table holds another number of rows than the topic, or other partition
    directories, fails (:func:`check_table`)."""
    columns = ["key", "value"]
    if partitioned:
        columns.append(f"date_add(date'2026-11-20', cast(cast(key as string) as int) % {PARTITION_VALUES}) "
                       f"as {PARTITION_COLUMN}")
    df = _reader(spark, BUILTIN, bootstrap, topic, max_offsets).selectExpr(*columns)
    with tempfile.TemporaryDirectory(prefix="bench-table-") as work:
        table, ckpt = os.path.join(work, "table"), os.path.join(work, "ckpt")
        writer = (df.writeStream.format(fmt).option("path", table).option("checkpointLocation", ckpt)
                  .trigger(availableNow=True))
        if partitioned:
            # Spark's file sink takes the writer's partitionBy; a Python data source never
            # sees it, kafka_eos_file takes the option (docs/file-sink.md).
            writer = writer.partitionBy(PARTITION_COLUMN) if fmt == PARQUET else writer.option(
                "partitionBy", PARTITION_COLUMN)
        if commits:
            writer = writer.option(COMMIT_LOG_OPTION, commits.path)
        started = time.perf_counter()
        query = writer.start()
        timing = _streaming(query, started)
        if fmt == NOOP:  # writes nothing: it must have been handed every record
            handed = sum(p["numInputRows"] for p in query.recentProgress)
            if handed != records:
                raise RuntimeError(f"table check: {fmt} was handed {handed:,} rows, the topic holds {records:,}")
        else:
            check_table(spark, fmt, table, records, PARTITION_VALUES if partitioned else 0)
        return timing


def check_table(spark, fmt: str, table: str, records: int, partitions: int) -> None:
    """The table holds ``records`` rows in ``partitions`` dt directories (0: none). Spark's
    sink is read through its ``_spark_metadata`` log (what Spark itself does when the log
    is there), kafka_eos_file's as the final files (a reader skips ``_kafka_eos``)."""
    if fmt == PARQUET and not os.path.isdir(os.path.join(table, "_spark_metadata")):
        raise RuntimeError(f"table check: {table} has no _spark_metadata log")
    df = spark.read.parquet(table)
    counted = df.count()
    if counted != records:
        raise RuntimeError(f"table check: {fmt} wrote {counted:,} rows, the topic holds {records:,}")
    found = sorted(d for d in os.listdir(table) if not d.startswith(("_", ".")) and os.path.isdir(
        os.path.join(table, d)))
    expected = min(partitions, records)
    if len(found) != expected or any(not d.startswith(f"{PARTITION_COLUMN}=") for d in found):
        raise RuntimeError(f"table check: {fmt} wrote partition directories {found[:8]}, expected {expected}")


# The raw client ceiling: confluent-kafka in plain processes (no Spark), as many as Spark
# has cores, each with a share of the partitions (or of the records to produce). Client
# settings are the connector's (source: 10 ms fetch.queue.backoff.ms, 8 MiB partition
# fetches, read_committed; sink: acks=all, idempotence), the cyclic GC is off, and the
# per-record work is the least that touches every key and value. Each process times
# itself after its client is set up; a run's time spans the first start to the last end.
RAW_SCRIPT = r"""
import gc, json, sys, time
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
gc.disable()
args = json.loads(sys.argv[1])
bs, mode, share, of = args["bootstrap"], args["mode"], args["share"], args["of"]
KEYS = [str(i).encode() for i in range(1000)]

def producer():
    return Producer({"bootstrap.servers": bs, "linger.ms": 5, "acks": "all", "enable.idempotence": True})

def send(p, topic, value, key):
    while True:
        try:
            p.produce(topic, value, key)
            return
        except BufferError:
            p.poll(0.01)

def consume(on_msgs):
    topic = args["topic"]
    parts = [p for p in range(args["partitions"]) if p % of == share]
    c = Consumer({"bootstrap.servers": bs, "group.id": "bench-raw", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "fetch.queue.backoff.ms": 10, "max.partition.fetch.bytes": 8 * 1024 * 1024})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    pending = {p for p, end in ends.items() if end > 0}
    started = time.time()
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    n = 0
    while pending:
        msgs = c.consume(10000, 0.1)
        if any(map(Message.error, msgs)):
            for m in msgs:
                if m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= ends[m.partition()]:
                        pending.discard(m.partition())
                elif m.error() is not None:
                    raise RuntimeError(str(m.error()))
            msgs = [m for m in msgs if m.error() is None]
        n += len(msgs)
        on_msgs(msgs)
    c.close()
    return started, n

if mode == "produce":
    p = producer()
    n = args["records"] // of + (args["records"] % of if share == 0 else 0)
    value = b"x" * args["size"]
    started = time.time()
    for i in range(n):
        send(p, args["out_topic"], value, KEYS[i % 1000])
        if i % 10000 == 0:
            p.poll(0)
    p.flush(120)
elif mode == "consume":
    started, n = consume(lambda msgs: (list(map(Message.key, msgs)), list(map(Message.value, msgs))))
else:  # consume -> produce, no transactions: the pipeline's ceiling
    p = producer()
    out = args["out_topic"]
    def forward(msgs):
        for m in msgs:
            send(p, out, m.value(), m.key())
        p.poll(0)
    started, n = consume(forward)
    p.flush(120)
print(json.dumps({"start": started, "end": time.time(), "records": n}))
"""


def raw(mode: str, workers: int = 0, **args) -> Timing:
    """Run the raw confluent-kafka loop in ``workers`` plain processes (default: one per
    core, at most one per partition); returns seconds from the first start to the last end."""
    workers = workers or max(1, min(os.cpu_count() or 1, args.get("partitions") or os.cpu_count() or 1))
    procs = [subprocess.Popen([sys.executable, "-c", RAW_SCRIPT,
                               json.dumps({"mode": mode, "share": i, "of": workers, **args})],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(workers)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"raw {mode} failed: {err[-2000:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return Timing(max(r["end"] for r in reports) - min(r["start"] for r in reports))
