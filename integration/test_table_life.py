"""A table's whole life with real Spark and a real Kafka: a new query taking over a
``kafka_eos_file`` table that other writers wrote.

* A stream whose ``foreachBatch`` appends to the table (and to topic OUT) drains its
  input; a new query with a new checkpoint then asks to start where the table ends
  (``startingOffsetsFromTable``). The writes inside foreachBatch record no Kafka offsets,
  so where the table ends is not known: the new query is refused before it writes
  anything, instead of reading the input again from the earliest offset.
* A streaming query into the table is killed with a batch pre-committed and undecided
  (its files pending); its checkpoint is lost, and a new query resumes from the table:
  once its first batch is done, nothing the killed query staged is left.
"""

from __future__ import annotations

import pytest

from integration.sink_runs import assert_crashed, audit_files, run_pipeline, seed
from kafka_eos_tools.topics import consume_all

# Pipelines of their own (about 1-2 minutes each): the gate runs them in its second lane,
# which has the time (docs/dev/testing.md, "Profiles").
pytestmark = pytest.mark.second_lane

RECORDS, BATCH = 600, 150


@pytest.fixture
def fanout(kafka, new_topic, tmp_path, warm_driver):
    """Topic IN (seeded), topic OUT, a table and a run of the foreachBatch pipeline into both."""
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    seed(kafka.bootstrap, input_topic, RECORDS)
    table = tmp_path / "table"

    class F:
        bootstrap, output, path = kafka.bootstrap, output_topic, table

        @staticmethod
        def run(checkpoint: str, *extra: str):
            return run_pipeline(kafka.bootstrap, input_topic, output_topic, str(tmp_path / checkpoint),
                                f"tl-{output_topic}", max_offsets=BATCH, log_dir=tmp_path / "logs",
                                job_args=["--foreach-batch", "--file-path", str(table), *extra], warm=warm_driver)

    return F


def test_a_table_written_inside_foreachbatch_is_refused_as_a_place_to_resume_from(fanout):
    run = fanout.run("checkpoint")
    assert run.returncode == 0, run.log[-3000:]
    assert audit_files(str(fanout.path), RECORDS).ok
    # The checkpoint is replaced (a code change): the new query asks the table where to start.
    run = fanout.run("checkpoint-2", "--resume-from-table", str(fanout.path))
    assert run.returncode != 0, run.log[-3000:]
    assert "Option 'startingOffsetsFromTable'" in run.log and "foreachBatch writes of query" in run.log, \
        run.log[-3000:]
    # Refused before anything was written: each record once in the table and in OUT.
    files = audit_files(str(fanout.path), RECORDS)
    assert files.ok and files.leftovers == [], files
    assert len(consume_all(fanout.bootstrap, fanout.output)) == RECORDS


def test_a_query_that_resumes_from_the_table_deletes_what_the_killed_query_left_staged(kafka, new_topic, tmp_path,
                                                                                        warm_driver):
    input_topic = new_topic(2, prefix="tl")
    seed(kafka.bootstrap, input_topic, RECORDS)
    table = tmp_path / "table"

    def run(checkpoint: str, fault: str | None = None, *extra: str):
        return run_pipeline(kafka.bootstrap, input_topic, "unused", str(tmp_path / checkpoint), "unused", fault=fault,
                            max_offsets=BATCH, log_dir=tmp_path / "logs", sink_format="kafka_eos_file",
                            sink_options=[f"path={table}"], job_args=list(extra), warm=warm_driver)

    # Killed after batch 1's tasks pre-committed, before its decision: its files stay pending.
    assert_crashed(run("checkpoint", "driver-before-decision@1"))
    assert audit_files(str(table), RECORDS).leftovers != []
    run_ = run("checkpoint-2", None, "--resume-from-table", str(table))
    assert run_.returncode == 0, run_.log[-3000:]
    files = audit_files(str(table), RECORDS)
    assert files.ok and files.leftovers == [], files  # before: the killed query's pending files, for good
