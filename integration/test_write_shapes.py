"""Exactly once in every way Spark calls the sinks, with real Spark and a real Kafka.

* ``df.write`` inside ``foreachBatch``, to both sinks at once: the pipeline of
  :mod:`kafka_eos_tools.demo.job` with ``--foreach-batch`` writes each micro-batch twice —
  to topic OUT with ``format("kafka_eos")``, then to a directory with
  ``format("kafka_eos_file")`` — the usual way to fan a stream out to several sinks. Every
  write must commit (not only the first of the query), and when Spark re-runs a
  micro-batch after a driver crash, its writes must add nothing: both outputs are
  audited for every input record exactly once.
* batch jobs beside a stream on one ``transactionalIdPrefix``; two streams on one prefix;
  a batch job whose commit fails after its decision;
* several sinks on one commit-log topic: another sink's open decision write never makes a
  reader act on a stale decision.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from integration.sink_runs import assert_crashed, audit_files, run_pipeline, seed
from kafka_eos_ds.kafka_sink import list_transactions
from kafka_eos_tools import faults
from kafka_eos_tools.audit import audit
from kafka_eos_tools.topics import consume_all

RECORDS = 600        # 2 input partitions, 150 offsets per micro-batch -> micro-batches 0..3
BATCH = 150


@pytest.fixture
def fanout(kafka, new_topic, tmp_path, warm_driver):
    """Topics IN (seeded) and OUT, an output directory, a checkpoint; helpers bound to them."""
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    seed(kafka.bootstrap, input_topic, RECORDS)

    class F:
        conf = {"bootstrap.servers": kafka.bootstrap}
        input = input_topic
        prefix = f"fb-{output_topic}"
        out_dir = tmp_path / "files"
        checkpoint = str(tmp_path / "checkpoint")
        output = output_topic
        warm = warm_driver

        @staticmethod
        def run(fault=None, extra=()):
            return run_pipeline(kafka.bootstrap, input_topic, output_topic, F.checkpoint, F.prefix, fault=fault,
                                max_offsets=BATCH, log_dir=tmp_path / "logs",
                                job_args=["--foreach-batch", "--file-path", str(F.out_dir), *extra], warm=warm_driver)

        @staticmethod
        def seed_more(records):
            seed(kafka.bootstrap, input_topic, records, start=RECORDS)

        @staticmethod
        def visible():
            return len(consume_all(kafka.bootstrap, output_topic))

        @staticmethod
        def open_ids():
            return [t.transactional_id for t in list_transactions(F.conf, F.prefix) if t.open]

        @staticmethod
        def assert_exactly_once(records=RECORDS):
            report = audit(F.conf, input_topic, output_topic)
            assert report.ok, report.table()
            assert report.records_in == records and report.unique_out == records == report.records_out
            files = audit_files(str(F.out_dir), records)
            assert files.ok and files.leftovers == [], files
            deadline = time.monotonic() + 30   # the last write's commit markers land
            while F.open_ids() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert F.open_ids() == []          # nothing holds back read_committed readers

    return F


def test_every_micro_batch_written_inside_foreachbatch_commits_in_both_sinks(fanout):
    run = fanout.run()
    assert run.returncode == 0, run.log[-3000:]
    fanout.assert_exactly_once()
    # Spark runs the last micro-batch again when its commit-log entry is missing (a crash
    # after the writes, before that entry): its function runs again and adds nothing.
    commits = Path(fanout.checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # the entry and its checksum (Hadoop's local file system)
        (commits / name).unlink(missing_ok=True)
    run = fanout.run()
    assert run.returncode == 0, run.log[-3000:]
    fanout.assert_exactly_once()


# Each point hits one write of micro-batch 1 (``*2``: its second write, the file sink; the
# first is the Kafka write), then the pipeline restarts from its checkpoint: Spark runs
# micro-batch 1 again, whose writes that were already committed must add nothing.
# CI's gate runs the partly committed Kafka write; the full profile every point.
@pytest.mark.parametrize("point, kafka_visible", [
    pytest.param("driver-before-decision@1", BATCH, marks=pytest.mark.full),  # Kafka write undecided: aborted
    ("driver-after-first-commit@1", None),               # Kafka write partly committed: recovery finishes it
    pytest.param("driver-after-done@1", 2 * BATCH, marks=pytest.mark.full),  # Kafka write done, file write not started
    pytest.param("driver-after-first-commit@1*2", 2 * BATCH, marks=pytest.mark.full),  # file write partly committed
    pytest.param("driver-after-all-commits@1*2", 2 * BATCH, marks=pytest.mark.full),  # commit log not written
    pytest.param("commit-raise@1", None, marks=pytest.mark.full),  # commit() raises: abort keeps the decision
])
def test_a_driver_crash_in_a_foreachbatch_write_leaves_both_outputs_exactly_once(fanout, point, kafka_visible):
    run = fanout.run(point)
    if point.startswith("commit-raise"):
        assert run.returncode != 0 and "injected fault at commit-raise" in run.log, run.log[-3000:]
    else:
        assert_crashed(run)
    time.sleep(2)  # commit markers of what was committed land
    visible = fanout.visible()
    if kafka_visible is None:
        assert BATCH < visible < 2 * BATCH, visible
    else:
        assert visible == kafka_visible
    run = fanout.run()
    assert run.returncode == 0, run.log[-3000:]
    fanout.assert_exactly_once()


@pytest.mark.full  # 3.5 minutes; each of its points has a case above
def test_a_pipeline_killed_again_and_again_keeps_both_outputs_exactly_once(fanout):
    """A run killed at a different point of a different write each time, then drained:
    2,400 records in 16 micro-batches, two writes each."""
    more = 4 * RECORDS
    fanout.seed_more(more - RECORDS)
    for point in ("driver-before-decision@1", "driver-after-first-commit@3*2", "driver-after-done@5",
                  "driver-after-first-commit@7", "driver-after-all-commits@9*2", "driver-before-decision@11*2",
                  "commit-raise@13"):
        run = fanout.run(point)
        assert run.killed or "injected fault at commit-raise" in run.log, run.log[-3000:]
    # A task killed after its pre-commit is retried; the run then drains the input.
    run = fanout.run("task-after-precommit@14#1!0")
    assert run.returncode == 0, run.log[-3000:]
    fanout.assert_exactly_once(more)


# -- several writers on one prefix -------------------------------------------------------

def _batch_job(bootstrap: str, topic: str, prefix: str, first: int, rows: int, tmp_path, fault=None,
               extra_options=(), gate=None) -> subprocess.CompletedProcess:
    """A df.write job in its own driver (so a driver fault can hit it): ids ``first..``;
    ``gate``: the file a ``gate`` fault creates and waits on."""
    script = tmp_path / f"job-{first}-{int(time.time() * 1000)}.py"
    script.write_text(textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        import kafka_eos_ds
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.driver.memory", "1g").getOrCreate())
        kafka_eos_ds.register(spark)
        df = spark.range({first}, {first + rows}, numPartitions=2).selectExpr(
            "concat('k', cast(id % 16 as string)) as key", "concat(cast(id as string), '|job') as value")
        w = (df.write.format("kafka_eos").mode("append").option("kafka.bootstrap.servers", {bootstrap!r})
             .option("topic", {topic!r}).option("transactionalIdPrefix", {prefix!r}))
        for key, value in {list(extra_options)!r}:
            w = w.option(key, value)
        w.save()
        spark.stop()
    """))
    env = {k: v for k, v in os.environ.items() if k not in faults.environment("", "", "")}
    env["PYSPARK_PYTHON"] = sys.executable
    if fault:
        env.update(faults.environment(fault, None if gate is None else str(gate),
                                      str(tmp_path / f"counts-{script.stem}")))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env,
                          cwd=str(Path(__file__).resolve().parents[1]), start_new_session=True)


def test_a_batch_job_on_a_streams_prefix_never_hides_the_streams_decision(fanout, tmp_path):
    """The stream commits batch 1 and dies before Spark's commit log records it; a batch
    job writes with the same prefix; the stream restarts: its re-run of batch 1 must be
    recognised as written (before, the job's decision hid the stream's and batch 1 was
    written twice)."""
    stream = lambda fault=None: run_pipeline(  # noqa: E731  (the stream's own sink, not foreachBatch)
        fanout.conf["bootstrap.servers"], fanout.input, fanout.output, fanout.checkpoint, fanout.prefix,
        fault=fault, max_offsets=BATCH, log_dir=tmp_path / "logs", warm=fanout.warm)
    assert_crashed(stream("driver-after-done@1"))
    job_topic = fanout.output  # the job writes the same topic: its ids are told apart by value
    job = _batch_job(fanout.conf["bootstrap.servers"], job_topic, fanout.prefix, 10_000, 10, tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    run = stream()
    assert run.returncode == 0, run.log[-3000:]
    values = [r.value.decode() for r in consume_all(fanout.conf["bootstrap.servers"], fanout.output)]
    stream_ids = [v.split("|", 1)[0] for v in values if not v.endswith("|job")]
    assert len(stream_ids) == len(set(stream_ids)) == RECORDS
    assert sum(v.endswith("|job") for v in values) == 10


# Full profile: a batch job's commit point after its decision; the gate runs the stream's
# (test_sink_crash.py test_5), a batch job on a stream's prefix above, and the app-write
# fences without Spark (tests/test_crashed_writes.py).
@pytest.mark.full
def test_a_batch_job_whose_commit_fails_after_its_decision_says_so_and_a_retry_adds_nothing(kafka, new_topic,
                                                                                         tmp_path):
    topic = new_topic(2, prefix="job")
    prefix = f"job-{topic}"
    app = [("txnAppId", "nightly-export"), ("txnVersion", "20261124")]
    failed = _batch_job(kafka.bootstrap, topic, prefix, 0, 300, tmp_path, fault="commit-raise", extra_options=app)
    assert failed.returncode != 0
    assert "(txnAppId 'nightly-export', txnVersion 20261124) is decided" in failed.stderr, failed.stderr[-3000:]
    retried = _batch_job(kafka.bootstrap, topic, prefix, 0, 300, tmp_path, extra_options=app)
    assert retried.returncode == 0, retried.stderr[-3000:]
    values = [r.value for r in consume_all(kafka.bootstrap, topic)]
    assert len(values) == len(set(values)) == 300  # the failed job's rows, finished by the retry, once


def test_two_streams_on_one_prefix_stop_loudly_naming_both(fanout, kafka, new_topic, tmp_path):
    """A second query takes the prefix over (a query whose checkpoint was lost is replaced
    that way); the first, started again, must stop before writing, naming both."""
    def stream(input_topic, checkpoint):
        return run_pipeline(kafka.bootstrap, input_topic, fanout.output, checkpoint, fanout.prefix,
                            max_offsets=BATCH, log_dir=tmp_path / "logs", warm=fanout.warm)

    first = stream(fanout.input, fanout.checkpoint)
    assert first.returncode == 0, first.log[-3000:]
    other_in = new_topic(2, prefix="in2")
    seed(kafka.bootstrap, other_in, 150)
    second = stream(other_in, str(tmp_path / "checkpoint-2"))
    assert second.returncode == 0, second.log[-3000:]
    fanout.seed_more(150)
    again = stream(fanout.input, fanout.checkpoint)
    assert again.returncode != 0
    assert "both write with this sink's transactional ids" in again.log, again.log[-3000:]


# -- several sinks on one commit log -------------------------------------------------------

def test_another_sinks_open_decision_write_never_yields_a_stale_decision(kafka, new_topic):
    """Sink B's decision write is left open on the commit log both sinks share (its driver
    died mid-write). Sink A writes a newer decision after it; a reader of A must see that
    newer one (before, read_committed stopped at B's open write and returned A's older)."""
    from confluent_kafka import Producer

    from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog
    from kafka_eos_ds.twophase.protocol import DECIDED, DONE, Decision
    from kafka_eos_tools.topics import unique_name

    conf, topic = {"bootstrap.servers": kafka.bootstrap}, unique_name("log")
    a = KafkaDecisionLog(conf, topic, "sink-a")
    a.fence_writers()
    a.write("q:q", Decision("q", 0, DONE))
    b = Producer({**conf, "transactional.id": "sink-b.decisions", "transaction.timeout.ms": 10_000})
    b.init_transactions(30)
    b.begin_transaction()
    b.produce(topic, key=b"sink-b|q:other", value=b"{}", partition=0)
    b.flush(30)  # open: B's driver died here
    a.write("q:q", Decision("q", 1, DECIDED))
    started = time.monotonic()
    latest = KafkaDecisionLog(conf, topic, "sink-a").latest("q:q")
    assert latest is not None and latest.batch_id == 1, latest
    # It waited for B's write to end (the broker aborts it after its 10 s timeout).
    assert time.monotonic() - started > 1
    del b


# -- operators -----------------------------------------------------------------------------

@pytest.mark.full  # an operator's tool; the sink's own finishing runs in the gate (crash point 3)
def test_an_operator_finishes_a_decided_batch_without_the_query(fanout, tmp_path):
    """The driver dies mid-commit and the query is not restarted (or, after a lost
    checkpoint, has no new input to run a batch with): ``kafka-eos transactions finish``
    commits what was decided before the transactions time out, and the query, when it runs
    again, adds nothing to it."""
    from kafka_eos_ds.cli import main as cli

    def stream(fault=None):
        return run_pipeline(fanout.conf["bootstrap.servers"], fanout.input, fanout.output, fanout.checkpoint,
                            fanout.prefix, fault=fault, max_offsets=BATCH, log_dir=tmp_path / "logs")

    assert_crashed(stream("driver-after-first-commit@1"))
    assert len(fanout.open_ids()) == 1                   # the decided, uncommitted transaction
    assert cli(["transactions", "finish", "--bootstrap", fanout.conf["bootstrap.servers"],
                "--prefix", fanout.prefix]) == 0
    deadline = time.monotonic() + 30
    while fanout.visible() < 2 * BATCH and time.monotonic() < deadline:
        time.sleep(0.5)
    assert fanout.visible() == 2 * BATCH and fanout.open_ids() == []
    run = stream()
    assert run.returncode == 0, run.log[-3000:]
    report = audit(fanout.conf, fanout.input, fanout.output)
    assert report.ok and report.unique_out == report.records_out == RECORDS, report.table()
