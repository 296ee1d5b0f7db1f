"""The exactly-once file sink with real Spark (and a real Kafka topic as the input).

First the plain paths (a streaming query, a batch write, bad options), then crash
injection (the crash points 1-5 and 9 of docs/dev/guarantees.md): the pipeline of :mod:`kafka_eos_tools.demo.job`
(kafka_eos source -> upper(value) -> ``format("kafka_eos_file")``) runs as a driver
subprocess, a fault hits one exact point of batch 1, the pipeline restarts from the
same checkpoint without the fault, and the directory is audited: every input record
exactly once in the final files, nothing left in ``_kafka_eos/in-progress`` or
``_kafka_eos/pending``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from integration.sink_runs import assert_crashed, audit_files, run_pipeline, seed
from integration.tables import Table, newest_decision
from kafka_eos_ds.table_sink.layout import query_token, writer_dir
from kafka_eos_tools.topics import run_to_end

RECORDS = 450        # 2 input partitions, 150 offsets per batch -> batches 0..2
BATCH = 150


# -- plain writes ----------------------------------------------------------------

def test_streaming_query_writes_each_record_once_and_readers_see_only_final_files(spark, kafka, new_topic,
                                                                                   tmp_path):
    topic = new_topic(2, prefix="fin")
    seed(kafka.bootstrap, topic, 400)
    out = tmp_path / "out"
    run_to_end(spark.readStream.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap)
               .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100")
               .load().selectExpr("key", "cast(value as string) as value")
               .writeStream.format("kafka_eos_file").option("path", str(out))
               .option("checkpointLocation", str(tmp_path / "ckpt")), kafka.bootstrap, topic)
    report = audit_files(str(out), 400)
    assert report.ok and report.leftovers == [], report
    finals = sorted(p.name for p in out.glob("part-*"))
    assert len(finals) == 8 and all(n.endswith(".parquet") for n in finals)  # 4 batches x 2 tasks
    # Spark's own reader of DIR sees the final files only: it skips '_kafka_eos', even
    # while that holds staged files (copies of a final file here).
    import shutil

    (writer,) = (out / "_kafka_eos").iterdir()  # the query's own staging
    shutil.copy(out / finals[0], writer / "pending" / "deadbeef-9-0-0.parquet")
    shutil.copy(out / finals[0], writer / "in-progress" / "deadbeef-9-1-0.parquet")
    assert spark.read.parquet(str(out)).count() == 400
    assert list((writer / "decisions").glob("*.json"))


def test_batch_write_appends_files_atomically_in_both_formats(spark, tmp_path):
    out = tmp_path / "out"
    df = spark.range(0, 1000).selectExpr("id", "cast(id as string) as s").repartition(3)
    df.write.format("kafka_eos_file").mode("append").option("path", f"file://{out}").save()
    assert spark.read.parquet(str(out)).count() == 1000
    assert len(list(out.glob("part-*.parquet"))) == 3
    df.write.format("kafka_eos_file").mode("append").option("fileFormat", "jsonl").save(str(out / "json"))
    got = spark.read.json(str(out / "json"))
    assert sorted(r.id for r in got.collect()) == list(range(1000))
    # Two batch writes never collide: each has its own write id in its file names.
    df.write.format("kafka_eos_file").mode("append").option("path", str(out)).save()
    assert spark.read.parquet(str(out)).count() == 2000
    assert not list((out / "_kafka_eos").glob("*/pending/*"))


@pytest.mark.parametrize("options, named", [
    ({}, "'path'"),
    ({"path": "gs://bucket/out"}, "'path'"),
    ({"fileFormat": "csv"}, "'fileFormat'"),
])
def test_bad_options_fail_before_anything_is_written(spark, tmp_path, options, named):
    out = tmp_path / "out"
    opts = {"path": str(out), **options} if "path" not in options and options != {} else options
    writer = spark.range(0, 10).write.format("kafka_eos_file").mode("append").options(**opts)
    with pytest.raises(Exception, match=named) as info:
        writer.save()
    assert "ConfigError" in str(info.value)
    assert not out.exists()


def test_overwrite_mode_is_refused(spark, tmp_path):
    with pytest.raises(Exception, match="overwrite"):
        spark.range(0, 10).write.format("kafka_eos_file").mode("overwrite").save(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


# -- crash injection -----------------------------------------------------------------

@pytest.fixture
def files(kafka, new_topic, tmp_path, warm_driver):
    """Topic IN (seeded), an output directory, a checkpoint, and helpers bound to them."""
    input_topic = new_topic(2, prefix="fin")
    seed(kafka.bootstrap, input_topic, RECORDS)

    class F:
        input = input_topic
        bootstrap = kafka.bootstrap
        out = tmp_path / "out"
        checkpoint = str(tmp_path / "checkpoint")

        @staticmethod
        def run(fault=None):
            return run_pipeline(kafka.bootstrap, input_topic, "unused", F.checkpoint, "unused", fault=fault,
                                max_offsets=BATCH, log_dir=tmp_path / "logs", sink_format="kafka_eos_file",
                                sink_options=[f"path={F.out}"], warm=warm_driver)

        @staticmethod
        def audit(expected=RECORDS):
            return audit_files(str(F.out), expected)

        @staticmethod
        def visible():
            return len(F.audit().ids)

        @staticmethod
        def pending():
            return sorted(p.name for p in (F.out / "_kafka_eos").glob("*/pending/*"))

    return F


def _finishes_exactly_once(f, fault=None):
    run = f.run(fault)
    assert run.returncode == 0, run.log[-3000:]
    report = f.audit()
    assert report.ok, report
    assert report.leftovers == [], report  # recovery cleaned every in-progress and pending file


@pytest.mark.full  # CI runs points 3, 5 and 9 of the file sink; the full profile all
def test_1_task_dies_before_precommit_is_retried_and_its_file_deleted(files):
    # In the last batch (2): no later recovery runs, so only the batch's commit can have
    # deleted the dead attempt's in-progress file.
    run = files.run("task-before-precommit@2#0!0")
    assert run.returncode == 0, run.log[-3000:]
    # Attempt 1 of partition 0 won batch 2 (attempt 0 died) ...
    query = json.loads(Path(files.checkpoint, "metadata").read_text())["id"]
    decision = newest_decision(Table(str(files.out)), writer_dir(f"q:{query}"))
    assert decision is not None and decision["batchId"] == 2 and decision["state"] == "done", decision
    assert [(t["partition"], t["attempt"]) for t in decision["transactions"]] == [(0, 1), (1, 0)], decision
    report = files.audit()
    assert report.ok, report
    # ... and attempt 0's in-progress file went at the commit.
    assert report.leftovers == [], report


@pytest.mark.full  # CI runs points 3, 5 and 9 of the file sink; the full profile all
def test_2_driver_dies_before_the_decision_deletes_the_batch_files(files):
    assert_crashed(files.run("driver-before-decision@1"))
    assert files.visible() == BATCH                  # batch 0 only
    assert len(files.pending()) == 2                 # batch 1's pre-committed files
    _finishes_exactly_once(files)


def test_3_driver_dies_after_committing_some_files(files):
    assert_crashed(files.run("driver-after-first-commit@1"))
    assert BATCH < files.visible() < 2 * BATCH       # batch 0 and part of batch 1
    assert len(files.pending()) == 1                 # the decided one not yet renamed
    _finishes_exactly_once(files)


@pytest.mark.full  # CI runs points 3, 5 and 9 of the file sink; the full profile all
def test_4_driver_dies_after_all_renames_before_sparks_commit_log(files):
    assert_crashed(files.run("driver-after-all-commits@1"))
    assert files.visible() == 2 * BATCH and files.pending() == []
    # The re-run of batch 1 writes nothing: its tasks drain their input without writing a
    # file, so a task that reaches the point before pre-commit kills the run.
    _finishes_exactly_once(files, fault="task-before-precommit@1:exit")


def test_5_commit_raises_and_abort_leaves_the_decided_batch_alone(files):
    run = files.run("commit-raise@1")
    assert run.returncode != 0 and "injected fault at commit-raise" in run.log, run.log[-3000:]
    assert BATCH < files.visible() < 2 * BATCH
    assert len(files.pending()) == 1                 # abort() kept the decided, unrenamed file
    _finishes_exactly_once(files)


@pytest.mark.parametrize("takeover", [False, pytest.param(True, marks=pytest.mark.full)],
                         ids=["restart", "new-query"])
def test_9_zombie_files_never_become_final(files, tmp_path, warm_driver, takeover):
    # Batch 1 is decided and partly committed (one of its files still pending) when the
    # driver dies: the next driver must commit it, and is the only step that could make a
    # zombie's file final.
    assert_crashed(files.run("driver-after-first-commit@1"))
    assert len(files.pending()) == 1
    # Zombies of the query (a task of an earlier run or stage attempt still writing, one
    # that pre-committed after the decision), under its own staging: an in-progress file,
    # a pending one of another attempt, and one under each decided task's id (its own stamp).
    query = json.loads(Path(files.checkpoint, "metadata").read_text())["id"]
    writer = files.out / "_kafka_eos" / writer_dir(f"q:{query}")
    token = query_token(query)
    for sub, name in (("in-progress", f"{token}-1-0-0.0000aaaa.parquet"),
                      ("pending", f"{token}-1-1-3.0000bbbb.parquet"),
                      ("pending", f"{token}-1-0-0.0000cccc.parquet"), ("pending", f"{token}-1-1-0.0000dddd.parquet")):
        (writer / sub).mkdir(parents=True, exist_ok=True)
        pq.write_table(pq.read_table(_zombie_table(writer)), writer / sub / name)
    if takeover:
        # The checkpoint is lost: a new query resumes from the table, finishes batch 1 for
        # the dead query, and once its first batch is done deletes what that query staged.
        run = run_pipeline(files.bootstrap, files.input, "unused", str(tmp_path / "checkpoint-2"), "unused",
                           max_offsets=BATCH, log_dir=tmp_path / "logs", sink_format="kafka_eos_file",
                           sink_options=[f"path={files.out}"], job_args=["--resume-from-table", str(files.out)],
                           warm=warm_driver)
    else:
        run = files.run()  # the restart from the checkpoint finishes batch 1
    assert run.returncode == 0, run.log[-3000:]
    report = files.audit()  # a zombie's row ('999999|ZOMBIE') in a final file fails it
    assert report.ok and report.leftovers == [], report


def _zombie_table(staging: Path) -> Path:
    import pyarrow as pa

    path = staging / ".zombie-source.parquet"
    pq.write_table(pa.table({"key": [b"k"], "value": ["999999|ZOMBIE"]}), path)
    return path
