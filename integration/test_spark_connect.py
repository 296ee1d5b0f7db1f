"""Exactly-once through Spark Connect, with the Connect server (the driver) SIGKILLed mid-run.

Users of managed platforms reach Spark through Spark Connect: their Python process is a
thin gRPC client, and the query, the data source and its Python workers live in the
server. This module starts the Connect server that ships with the installed pyspark
(integration/connect_server.py: the SparkConnectServer class under the wheel's
spark-submit, gRPC on 127.0.0.1, local[2]), connects with
``SparkSession.builder.remote(...)`` and runs the pipeline of the README (kafka_eos
source -> upper(value) -> kafka_eos sink) from the client.

The format reaches the server the way a user's would: the server's Python has
kafka_eos_ds installed, and Spark's discovery finds the ``pyspark_kafka_eos`` shim, so
the crash test never calls ``register``. Registration from the client
(``spark.dataSource.register``, i.e. ``kafka_eos_ds.register(spark)``) is tested on its
own. See docs/spark-connect.md.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from integration.connect_server import ConnectServer, QueryWatch, Watchdog, bounded, client_missing, restore_client_mode
from kafka_eos_ds.kafka_sink import list_transactions
from kafka_eos_tools.audit import audit
from kafka_eos_tools.demo.chaos import InputFeeder, TailingReader
from kafka_eos_tools.demo.job import available_now_supported
from kafka_eos_tools.topics import end_offsets, produce

# The oldest pyspark line (4.0: rows into the sink, no read limits) runs this module too, in
# the full profile: the gate runs Connect on the newest line and the rows path on 4.0 in
# test_sink_crash.py and test_demo.py (the 4.0 run took 4.8 minutes of the gate's 35).
pytestmark = pytest.mark.oldest_full

RESULTS = Path(os.environ.get("KAFKA_EOS_RESULTS_DIR", ".kafka-eos/results"))
RECORDS = 3_000         # the least input; the feeder keeps AHEAD records ahead of OUT
AHEAD = 600
MAX_OFFSETS = 200       # per trigger (Spark's read limit from 4.2, the reader's own cap before)
KILL_AFTER = 900        # records visible in OUT before the server is killed
TRIGGER = "500 milliseconds"
STEP_TIMEOUT = 90.0     # for each wait: output before the kill, the drain after it
TEST_BUDGET = 360.0     # the crash test as a whole (watchdog); it takes 1.5-2 minutes
AIM_TIMEOUT = 20.0      # how long to wait for a batch with open transactions before killing anyway


def _record(name: str, payload: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / "connect.jsonl").open("a") as fh:
        fh.write(json.dumps({"test": name, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             **payload}) + "\n")


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """A running Spark Connect server (``.url`` is its sc:// URL); stopped by pid at the end,
    whatever happened. Tests may kill and start it again."""
    missing = client_missing()
    if missing:
        pytest.fail(f"the Spark Connect client cannot run: {missing}")
    saved = {key: os.environ.get(key) for key in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    server = ConnectServer(tmp_path_factory.mktemp("spark-connect"))
    try:
        server.start()
        yield server
    finally:
        server.kill()
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

        leftover = getattr(RemoteSparkSession, "_default_session", None)
        if leftover is not None:  # its server is gone: drop it without an RPC
            ConnectServer.abandon(leftover)
        restore_client_mode(saved)


def _source_options(bootstrap: str, topic: str) -> dict:
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    options["maxOffsetsPerTrigger"] = str(MAX_OFFSETS)
    return options


def _start_query(spark, bootstrap: str, input_topic: str, output_topic: str, prefix: str, checkpoint: str,
                 available_now: bool):
    df = spark.readStream.format("kafka_eos").options(**_source_options(bootstrap, input_topic)).load()
    writer = (df.selectExpr("key", "upper(cast(value as string)) as value")
              .writeStream.format("kafka_eos")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("topic", output_topic)
              .option("transactionalIdPrefix", prefix)
              .option("checkpointLocation", checkpoint)
              .queryName("kafka-eos-connect"))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=TRIGGER)
    return writer.start()


def _server_log(server: ConnectServer) -> str:
    return f"\n--- server log ({server.log}):\n{server.log_tail(40)}"


def test_register_from_the_client_reaches_the_server(kafka, new_topic, connect_server):
    """``spark.dataSource.register`` over Connect pickles the class on the client and the
    server uses it. A subclass under a name discovery cannot know proves the registration
    itself took effect; ``kafka_eos_ds.register`` (the documented call) works too."""
    import kafka_eos_ds
    from kafka_eos_ds.datasource import KafkaEosDataSource

    topic = new_topic(1, prefix="reg")
    produce(kafka.bootstrap, topic, [b"a", b"b", b"c"])

    def client_only_class():
        # Defined in a function, so cloudpickle ships the class by value (its base by
        # reference: the server's Python imports kafka_eos_ds).
        class ClientRegistered(KafkaEosDataSource):
            @classmethod
            def name(cls) -> str:
                return "kafka_eos_client_registered"

        return ClientRegistered

    def values(spark, fmt: str) -> list:
        df = spark.read.format(fmt).option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", topic).load()
        return sorted(bytes(r.value) for r in df.select("value").collect())

    with Watchdog(connect_server, 120):
        spark = connect_server.session()
        try:
            # Discovery on the server (the installed shim), no register call.
            assert values(spark, "kafka_eos") == [b"a", b"b", b"c"]
            with pytest.raises(Exception, match="(?i)kafka_eos_client_registered"):
                values(spark, "kafka_eos_client_registered")
            spark.dataSource.register(client_only_class())
            assert values(spark, "kafka_eos_client_registered") == [b"a", b"b", b"c"]
            kafka_eos_ds.register(spark)
            assert values(spark, "kafka_eos") == [b"a", b"b", b"c"]
        finally:
            connect_server.close(spark)


def test_exactly_once_through_spark_connect_when_the_server_is_killed(kafka, new_topic, tmp_path, connect_server):
    import pyspark

    started = time.monotonic()
    conf = {"bootstrap.servers": kafka.bootstrap}
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    prefix = f"connect-{output_topic}"
    checkpoint = str(tmp_path / "checkpoint")
    tail = TailingReader(kafka.bootstrap, output_topic)
    tail.start()
    feeder = InputFeeder(kafka.bootstrap, input_topic, at_least=RECORDS, ahead=AHEAD, seen=lambda: len(tail.ids))
    feeder.start()
    available_now = available_now_supported()
    try:
        with Watchdog(connect_server, TEST_BUDGET):
            # Run 1: a processing-time query from a remote session, until part of the input
            # is in OUT; then the server (the driver JVM with its Python workers) is
            # SIGKILLed. The feeder keeps input coming, so batches run back to back and the
            # kill falls inside one (the open transactions it leaves behind are counted).
            spark = connect_server.session()
            query = _start_query(spark, kafka.bootstrap, input_topic, output_topic, prefix, checkpoint, False)
            deadline = time.monotonic() + STEP_TIMEOUT
            with QueryWatch(query) as watch:
                while len(tail.ids) < KILL_AFTER:
                    assert watch.failure is None, watch.failure + _server_log(connect_server)
                    assert time.monotonic() < deadline, (
                        f"only {len(tail.ids)} records in OUT after {STEP_TIMEOUT:.0f}s" + _server_log(connect_server))
                    time.sleep(0.05)
                # Aim inside a batch's write: kill once its transactions are open (for at
                # most AIM_TIMEOUT; the watch stays on meanwhile).
                aim_deadline = time.monotonic() + AIM_TIMEOUT
                while time.monotonic() < aim_deadline and watch.failure is None:
                    try:
                        if bounded(lambda: list_transactions(conf, prefix, open_only=True), 10, "ListTransactions"):
                            break
                    except TimeoutError:
                        break
            killed = connect_server.kill()
            seen_at_kill = len(tail.ids)
            ConnectServer.abandon(spark)
            assert not connect_server.alive()
            open_at_kill = bounded(lambda: list_transactions(conf, prefix, open_only=True), 60, "ListTransactions")

            # Run 2: a new server (same address), a new session, the same query from the
            # same checkpoint; no register call (discovery on the server finds the format).
            connect_server.start()
            fed = feeder.finish()
            spark = connect_server.session()
            try:
                assert spark.streams.active == []  # nothing of run 1 survived the crash
                query = _start_query(spark, kafka.bootstrap, input_topic, output_topic, prefix, checkpoint,
                                     available_now)
                if available_now:
                    # AvailableNow stops by itself once it has read what was there at its start.
                    assert query.awaitTermination(STEP_TIMEOUT), (
                        f"the availableNow query did not finish in {STEP_TIMEOUT:.0f}s" + _server_log(connect_server))
                    assert query.exception() is None, f"{query.exception()}" + _server_log(connect_server)
                else:
                    # pyspark < 4.2: no AvailableNow for Python sources; stop once OUT has
                    # every id (the audit counts copies, so extra output still fails it).
                    deadline = time.monotonic() + STEP_TIMEOUT
                    with QueryWatch(query) as watch:
                        while len(tail.ids) < fed and time.monotonic() < deadline:
                            assert watch.failure is None, watch.failure + _server_log(connect_server)
                            time.sleep(0.2)
                    query.stop()
                    assert query.exception() is None, f"{query.exception()}" + _server_log(connect_server)
            finally:
                connect_server.close(spark)

            report = audit(conf, input_topic, output_topic)
            left_open = bounded(lambda: list_transactions(conf, prefix, open_only=True), 60, "ListTransactions")
            tail_deadline = time.monotonic() + 30
            while len(tail.ids) < report.unique_out and time.monotonic() < tail_deadline:
                time.sleep(0.2)
    finally:
        feeder.finishing.set()
        tail.stopping.set()
        tail.join(10)
    seconds = round(time.monotonic() - started, 1)
    figures = {"pyspark": pyspark.__version__, "records_in": report.records_in, "records_out": report.records_out,
               "unique_out": report.unique_out, "duplicates": report.duplicates, "losses": report.losses,
               "unexpected": report.unexpected, "order_violations": report.order_violations,
               "tail_duplicates": tail.duplicates, "fed": fed, "seen_at_kill": seen_at_kill,
               "open_transactions_at_kill": len(open_at_kill), "processes_killed": len(killed),
               "max_offsets_per_trigger": MAX_OFFSETS,
               "restart_trigger": "availableNow" if available_now else f"processingTime {TRIGGER}",
               "seconds": seconds}
    _record("spark connect: server SIGKILLed mid-run", figures)
    print("spark connect: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    assert report.records_in == fed >= RECORDS, report.table()
    assert report.duplicates == 0, report.table()
    # A record missing from read_committed output is lost or held back by a transaction
    # left open: the transactions at the kill and after the run tell which.
    ends = {isolation: end_offsets(kafka.bootstrap, output_topic, isolation)
            for isolation in ("read_committed", "read_uncommitted")}
    held = (f"\nopen at the kill: {open_at_kill}\nopen after the run: {left_open}"
            f"\nOUT's ends: {ends}; IN's: {end_offsets(kafka.bootstrap, input_topic)}")
    assert report.losses == 0, report.table() + held
    assert report.unexpected == 0 and report.order_violations == 0, report.table()
    assert report.records_out == report.unique_out == fed, report.table()
    assert tail.duplicates == 0          # a read_committed reader never saw a duplicate
    assert left_open == []               # nothing left to hold back read_committed readers
    # The kill landed mid-run: input remained, and the restarted query wrote it.
    assert KILL_AFTER <= seen_at_kill < fed


def test_foreachbatch_writes_through_spark_connect_add_nothing_when_a_micro_batch_runs_again(
        kafka, new_topic, tmp_path, connect_server):
    """Spark Connect runs a foreachBatch function in its own session on the server, without
    the stream's properties: ``txnAppId``/``txnVersion`` give each write its identity.
    Spark runs a micro-batch again when its commit-log entry is missing (a crash between
    the write and that entry): the second run of the function adds nothing."""
    conf = {"bootstrap.servers": kafka.bootstrap}
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    produce(kafka.bootstrap, input_topic, [f"{i}|record {i}".encode() for i in range(600)])
    checkpoint = tmp_path / "checkpoint"
    bootstrap, prefix, app = kafka.bootstrap, f"connect-fb-{output_topic}", f"app-{output_topic}"

    def write(df, batch_id):
        (df.selectExpr("key", "upper(cast(value as string)) as value").write.format("kafka_eos").mode("append")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", output_topic)
         .option("transactionalIdPrefix", prefix)
         .option("txnAppId", app).option("txnVersion", batch_id).save())

    def run_once():
        spark = connect_server.session()
        try:
            query = (spark.readStream.format("kafka_eos").option("kafka.bootstrap.servers", bootstrap)
                     .option("subscribe", input_topic).option("startingOffsets", "earliest").load()
                     .writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint))
                     .trigger(availableNow=True).start())
            assert query.awaitTermination(STEP_TIMEOUT), "the availableNow query did not finish" + \
                _server_log(connect_server)
            assert query.exception() is None, f"{query.exception()}" + _server_log(connect_server)
        finally:
            connect_server.close(spark)

    with Watchdog(connect_server, 300):
        run_once()
        first = audit(conf, input_topic, output_topic)
        assert first.ok and first.unique_out == first.records_out == 600, first.table()
        last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        for name in (str(last), f".{last}.crc"):  # the last micro-batch's entry (and checksum): run it again
            (checkpoint / "commits" / name).unlink(missing_ok=True)
        run_once()
    report = audit(conf, input_topic, output_topic)
    assert report.ok and report.unique_out == report.records_out == 600, report.table()
    assert bounded(lambda: list_transactions(conf, prefix, open_only=True), 60, "ListTransactions") == []
    _record("spark connect: foreachBatch with txnAppId, last micro-batch run again",
            {"records_in": report.records_in, "records_out": report.records_out, "duplicates": report.duplicates,
             "losses": report.losses})
