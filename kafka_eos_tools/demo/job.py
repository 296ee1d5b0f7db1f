"""The pipeline: read topic IN, upper-case each value, write topic OUT, exactly once.

Run as ``python -m kafka_eos_tools.demo.job --bootstrap B --input IN --output OUT
--checkpoint DIR --prefix P [--available-now] [--shuffle]``. It is the same code a user
writes; the demo and the chaos tests kill this process at random and start it again
from the same checkpoint.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import sys
from typing import Sequence


def build_query(spark, args: argparse.Namespace):
    # The source's consumer group doubles as the record of where the output ends: the
    # exactly-once sink commits each batch's end offsets to it inside the batch's
    # transaction ('sourceGroupId'). A query that lost its checkpoint therefore starts
    # from the group (partitions without a committed offset: from the earliest).
    group = args.group or f"{args.prefix}-source"
    reader = (spark.readStream.format("kafka_eos")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("kafka.group.id", group))
    if args.resume_from_table:
        # A kafka_eos_file table says where it ends; its store's settings are the sink's.
        reader = reader.option("startingOffsetsFromTable", args.resume_from_table)
        for item in args.sink_option or []:
            key, _, value = item.partition("=")
            if key.startswith("fs."):
                reader = reader.option(key, value)
    else:
        reader = reader.option("startingOffsets", "group")
    if args.max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets))
    for item in args.source_option or []:
        key, _, value = item.partition("=")
        reader = reader.option(key, value)
    df = reader.load()
    if args.shuffle:
        # A shuffle between source and sink: tasks of the write stage no longer map
        # one-to-one to input partitions. Keyed: all records of a key come from one input
        # partition, i.e. one map task, whose output order the shuffle keeps.
        df = df.repartition(3, "key")
    # The record id is the value's prefix before '|' (digits), so upper() keeps it.
    # --column adds more (a table's partition columns, say: "timestamp", "pmod(crc32(key), 3) as shard").
    out = df.selectExpr("key", "upper(cast(value as string)) as value", *(args.column or ()))
    if args.foreach_batch:
        return _trigger(out.writeStream.foreachBatch(batch_writes(args)).option("checkpointLocation", args.checkpoint)
                        .queryName("kafka-eos-demo"), args).start()
    writer = (out.writeStream.format(args.sink_format)
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.output)
              .option("checkpointLocation", args.checkpoint)
              .queryName("kafka-eos-demo"))
    if args.sink_format == "kafka_eos":
        writer = writer.option("transactionalIdPrefix", args.prefix).option("sourceGroupId", group)
    for item in args.sink_option or []:
        key, _, value = item.partition("=")
        writer = writer.option(key, value)
    return _trigger(writer, args).start()


def _trigger(writer, args: argparse.Namespace):
    if args.available_now and available_now_supported():
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")


def batch_writes(args: argparse.Namespace):
    """The foreachBatch function: each micro-batch written with df.write, to OUT with
    ``kafka_eos`` and (``--file-path``) to a directory with ``kafka_eos_file``: the usual
    way to fan a stream out to several sinks. With ``--txn-app-id`` each write names its
    identity explicitly (``txnAppId``/``txnVersion``, as Spark Connect's foreachBatch needs);
    without, the sinks take it from the stream's micro-batch."""

    def write(df, batch_id: int) -> None:
        kafka = (df.write.format("kafka_eos").mode("append").option("kafka.bootstrap.servers", args.bootstrap)
                 .option("topic", args.output).option("transactionalIdPrefix", args.prefix))
        for item in args.sink_option or []:
            key, _, value = item.partition("=")
            kafka = kafka.option(key, value)
        if args.txn_app_id:
            kafka = kafka.option("txnAppId", args.txn_app_id).option("txnVersion", batch_id)
        kafka.save()
        if args.file_path:
            files = df.write.format("kafka_eos_file").mode("append").option("path", args.file_path)
            if args.txn_app_id:
                files = files.option("txnAppId", args.txn_app_id + "-files").option("txnVersion", batch_id)
            files.save()

    return write


def available_now_supported() -> bool:
    """Whether Trigger.AvailableNow drains a Python source in several batches (pyspark
    4.2+). Before 4.2 Spark wraps the source and runs a single batch, which
    ``maxOffsetsPerTrigger`` caps: the job then drains with :class:`Drain` instead."""
    from kafka_eos_ds.source.options import admission_control_available

    return admission_control_available()


class Drain:
    """``--available-now`` where Spark cannot: stop once a batch has reached the input's
    read_committed end as it was when the job started (what AvailableNow would read)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka_eos_ds.source.metadata import KafkaMetadata
        from kafka_eos_ds.source.options import SourceOptions

        metadata = KafkaMetadata(SourceOptions.from_spark(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=True))
        try:
            self.target = {(tp[0], str(tp[1])): end for tp, end in metadata.latest(metadata.partitions()).items()}
        finally:
            metadata.close()

    def reached(self, query) -> bool:
        progress = query.lastProgress
        if not progress or not progress.get("sources"):
            return False
        end = progress_offsets(progress["sources"][0].get("endOffset"))
        return all(end.get(topic, {}).get(part, 0) >= offset for (topic, part), offset in self.target.items())


def progress_offsets(value) -> dict:
    """A source's offsets as StreamingQueryProgress gives them: JSON text, or (pyspark 4.0)
    the repr of a dict; None or "null" before the first batch."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = ast.literal_eval(value)
    return value or {}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kafka_eos_tools.demo.job")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--prefix", required=True, help="transactionalIdPrefix")
    parser.add_argument("--group", default=None, help="the source's consumer group (default: <prefix>-source)")
    parser.add_argument("--max-offsets", type=int, default=2000, help="maxOffsetsPerTrigger")
    parser.add_argument("--trigger-ms", type=int, default=500)
    parser.add_argument("--available-now", action="store_true", help="drain the input and exit")
    parser.add_argument("--shuffle", action="store_true")
    parser.add_argument("--master", default=None,
                        help="Spark master (default local[2]; under spark-submit, the one it was given)")
    parser.add_argument("--sink-format", default="kafka_eos",
                        help="kafka_eos, or kafka for Spark's built-in sink (needs --jars)")
    parser.add_argument("--jars", default=None, help="spark.jars (for the built-in Kafka connector)")
    parser.add_argument("--driver-java-options", default=None, help="spark.driver.extraJavaOptions")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="another Spark setting (e.g. spark.hadoop.fs.s3a.endpoint=...); credentials belong "
                             "in the environment, not here, where process listings show them")
    parser.add_argument("--sink-option", action="append", help="extra sink option key=value")
    parser.add_argument("--source-option", action="append", help="extra source option key=value")
    parser.add_argument("--column", action="append", help="another output column (a SQL expression)")
    parser.add_argument("--resume-from-table", default=None,
                        help="start where this kafka_eos_file table ends (startingOffsetsFromTable)")
    parser.add_argument("--foreach-batch", action="store_true",
                        help="write each micro-batch with df.write inside foreachBatch")
    parser.add_argument("--file-path", default=None, help="with --foreach-batch: also write files to this directory")
    parser.add_argument("--txn-app-id", default=None, help="with --foreach-batch: txnAppId of the writes")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    spark = session(args.master, args.jars, args.driver_java_options, args.conf)
    query, drain = start(spark, args)
    stopping: list = []
    # SIGTERM is a clean stop: the query finishes its current step and stops.
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    run_until_done(query, drain, stopping)
    spark.stop()
    return 0


def session(master: str | None, jars: str | None, java_options: str | None = None, conf: Sequence[str] = ()):
    """The job's SparkSession, with the sources registered (``master``: default local[2];
    under spark-submit, the one it was given). ``java_options``: the driver JVM's, passed
    to spark-submit when this process starts the JVM; ``conf``: more settings, ``key=value``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafka_eos_ds

    builder = SparkSession.builder
    # Under spark-submit the master comes from the command line; a default here would override it.
    # (spark-submit starts the JVM first and hands Python its gateway port.)
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or "local[2]")
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    for setting in conf:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--conf takes KEY=VALUE, got {setting!r}")
        builder = builder.config(key.strip(), value)
    spark = (builder.appName("kafka-eos-demo")
             .config("spark.sql.shuffle.partitions", "3")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "1g")
             # An idle query reports progress every second, so a drain sees it is done.
             .config("spark.sql.streaming.noDataProgressEventInterval", "1000")
             .config("spark.jars", jars or "")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kafka_eos_ds.register(spark)
    return spark


def start(spark, args: argparse.Namespace):
    """Start the query; with ``--available-now`` where Spark cannot drain, also the
    :class:`Drain` that tells when to stop it (its target read before the query starts)."""
    drain = Drain(args.bootstrap, args.input) if args.available_now and not available_now_supported() else None
    query = build_query(spark, args)
    print(f"JOB_STARTED {query.id}", flush=True)
    return query, drain


def run_until_done(query, drain: Drain | None, stopping: Sequence = ()) -> None:
    """Wait for the query to end: by itself (availableNow, or a failure, which raises), once
    ``drain`` is reached, or once ``stopping`` holds anything. The wait returns to Python
    every second so a signal handler gets to run."""
    while not query.awaitTermination(1):
        if stopping or (drain is not None and drain.reached(query)):
            query.stop()
            break


if __name__ == "__main__":
    sys.exit(main())
