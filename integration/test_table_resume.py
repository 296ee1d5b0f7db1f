"""A Kafka-to-table pipeline whose checkpoint is lost resumes where the table ends
(``startingOffsetsFromTable``), with no loss and no duplicate: the table on HDFS (a real
MiniDFSCluster), real Kafka, the pipeline of :mod:`kafka_eos_tools.demo.job`.

The driver dies in the middle of committing batch 1 (some of its files final, the rest
pending), its checkpoint is deleted, and a new query starts with a new checkpoint: its
source starts at the end offsets batch 1's decision recorded in the table, and its sink
finishes batch 1 before writing batch 2.
"""

from __future__ import annotations

import shutil

import pytest

pytestmark = pytest.mark.storage  # starts HDFS: the gate's second lane

pytest.importorskip("hdfs_native", reason="the HDFS client is not installed (pip install -e '.[hdfs]')")

from integration.sink_runs import assert_crashed, run_pipeline, seed  # noqa: E402
from integration.tables import Table  # noqa: E402

RECORDS, BATCH = 450, 150
COLUMNS = ["timestamp", "pmod(crc32(key), 3) as shard"]


def test_a_new_query_resumes_where_the_table_ends_after_the_checkpoint_is_lost(kafka, hdfs, new_topic, tmp_path,
                                                                                warm_driver):
    topic = new_topic(2, prefix="res")
    seed(kafka.bootstrap, topic, RECORDS)
    table = Table(hdfs.path("events"))
    columns = [arg for c in COLUMNS for arg in ("--column", c)]
    options = [f"path={table.url}", "partitionBy=dt=date(timestamp),shard"]

    def run(checkpoint, fault=None, resume=False):
        extra = ["--resume-from-table", table.url] if resume else []
        return run_pipeline(kafka.bootstrap, topic, "unused", str(checkpoint), "unused", fault=fault,
                            max_offsets=BATCH, log_dir=tmp_path / "logs", sink_format="kafka_eos_file",
                            sink_options=options, job_args=columns + extra, warm=warm_driver)

    assert_crashed(run(tmp_path / "checkpoint", "driver-after-first-commit@1"))
    assert BATCH < table.visible() < 2 * BATCH and table.pending() != []
    shutil.rmtree(tmp_path / "checkpoint")  # lost
    finished = run(tmp_path / "checkpoint-2", resume=True)
    assert finished.returncode == 0, finished.log[-3000:]
    report = table.audit(RECORDS)
    assert report.ok, report  # no record lost (batch 1 finished), none twice (batches 0, 1 not re-read)
    assert report.leftovers == [], report  # the lost query's decided files were all renamed
