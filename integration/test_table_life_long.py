"""A Kafka-to-table pipeline's long life on HDFS and on S3 (MinIO), with the Hive metastore
(:mod:`kafka_eos_tools.demo.table_life`): two pipelines write one partitioned table, each
driver SIGKILLed three times at random moments, while a retention job drops old hours
through the metastore; then pipeline 1's checkpoint is replaced twice
(``startingOffsetsFromTable``), the second time after retention dropped the partitions of
the batch a dead query decided and a new query finished.

Every input id of both pipelines is in the table once or was removed by retention once
(never both), through the metastore and over the path; no dropped partition is back; no
staged file (nor, on S3, upload in progress) is left; every partition with files is
registered once; every new query starts. On S3 the sink is given the store as s3a options,
the metastore serves ``s3a://`` tables (hadoop-aws on its classpath, the credentials in its
environment), and the secret key appears in no log of any run.

Marked ``full`` and ``storage``: three servers, two drivers at once, about twenty driver
runs; several minutes on the 2-core machine. Every driver is stopped by its process id, by
the run itself, whatever happens.
"""

from __future__ import annotations

import sys

import pytest

pytestmark = [pytest.mark.storage, pytest.mark.full, pytest.mark.timeout(2400)]

pytest.importorskip("hmsclient", reason="the metastore client is not installed (pip install -e '.[hive]')")

from integration.tables import s3_options  # noqa: E402
from kafka_eos_tools.demo import processes  # noqa: E402
from kafka_eos_tools.demo.table_life import LifePlan, run_table_life  # noqa: E402

CRASHES = 3


@pytest.mark.parametrize("store", ["hdfs", "s3"])
def test_two_pipelines_killed_beside_retention_write_every_record_once_and_every_new_query_starts(
        store, request, kafka, tmp_path):
    if store == "s3":
        pytest.importorskip("boto3", reason="the S3 client is not installed (pip install -e '.[s3]')")
        s3 = request.getfixturevalue("s3")
        metastore = request.getfixturevalue("s3_metastore")
        root, options = f"s3a://{s3.new_bucket()}", s3_options(s3)
    else:
        pytest.importorskip("hdfs_native", reason="the HDFS client is not installed (pip install -e '.[hdfs]')")
        metastore = request.getfixturevalue("metastore")
        root, options = request.getfixturevalue("hdfs").url, {}
    said: list[str] = []

    def progress(message: str, frac: float) -> None:
        if said[-1:] != [message]:  # each step once, not every half second
            said.append(message)
            print(f"[{frac:4.0%}] {message}", file=sys.stderr, flush=True)

    plan = LifePlan(bootstrap=kafka.bootstrap, store=root, metastore=metastore.uri, workdir=tmp_path / "life",
                    crashes=CRASHES, seed=36, run_timeout=300.0, replication=kafka.replication(),
                    store_options=options)
    try:
        result = run_table_life(plan, progress)
    finally:
        left = processes.naming(str(plan.workdir))
    assert left == [], f"the run left processes running: {left}"
    print(result.summary())
    audit = result.audit
    assert audit.ok, f"{audit.table_text()}\n{audit.to_dict()}\nlogs: {result.logs}"
    assert result.kills == {1: CRASHES, 2: CRASHES}
    for read in (audit.metastore, audit.dataset):
        report = read.report
        # Each id once: in the table, or among the rows retention removed.
        assert report.records_in == result.records_in[1] + result.records_in[2]
        assert report.records_out == report.unique_out == report.records_in
        assert report.duplicates == report.losses == report.unexpected == read.misplaced == 0
    assert audit.dropped_back == [] and audit.staged_left == [] and audit.late_files == []
    assert audit.unregistered == audit.registered_empty == audit.registered_twice == audit.wrong_location == []
    # Retention removed much, and the last new query started after it dropped the
    # partitions of the batch the dead query decided and query A finished.
    assert result.dropped >= 4 and result.removed_ids > 0 and len(audit.registered) > 0
    assert result.dead_files_dropped, f"retention dropped no file of the dead query's batch {result.dead_batch}"
    if store == "s3":
        logs = "".join(p.read_text(errors="replace") for p in plan.workdir.rglob("*.log"))
        assert logs and s3.secret_key and s3.secret_key not in logs
