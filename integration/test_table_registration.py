"""Writers of one table register the same new partitions at once (real Hive metastore):
each write commits, every partition is registered once, and every row is in the table
once. A unique-key clash between two registrations is retried by the sink, never taken
for a refusal of the partition.

The writers are `txnAppId` writes, each its own app, or plain batch jobs (`df.write`
without an app), whose commits also finish each other's decisions: a job whose decision
another finished reports success (docs/dev/decisions.md, "A batch job whose decision
another job finished reports success"; tests/test_concurrent_jobs.py)."""

from __future__ import annotations

import threading
import uuid

import pyarrow as pa
import pytest

pytestmark = pytest.mark.storage  # starts a metastore: the gate's second lane

pytest.importorskip("hmsclient", reason="the metastore client is not installed (pip install -e '.[hive]')")

from pyspark.sql.types import LongType, StringType, StructField, StructType  # noqa: E402

from integration.tables import Table, s3_options  # noqa: E402
from kafka_eos_ds.table_sink.config import FileSinkConfig  # noqa: E402
from kafka_eos_ds.table_sink.sink import FileSink  # noqa: E402
from kafka_eos_ds.twophase import Kind, WriteId  # noqa: E402
from kafka_eos_ds.twophase.identity import WriteSpec  # noqa: E402
from kafka_eos_ds.twophase.writers import Task  # noqa: E402

SCHEMA = StructType([StructField("id", LongType()), StructField("country", StringType())])
WRITERS, ROUNDS, PARTITIONS = 4, 3, 12  # one call registers twelve: a wide window for a clash


@pytest.mark.parametrize("writers, store", [("apps", "local"), ("jobs", "local"), ("apps", "s3")])
def test_writers_registering_one_new_partition_at_once_each_commit_and_register_it_once(request, tmp_path,
                                                                                       writers, store):
    from hmsclient import hmsclient
    from hmsclient.genthrift.hive_metastore.ttypes import Database

    if store == "s3":
        # The metastore on s3a:// made a partition's "directory" (a marker) itself and, when
        # its add then clashed with another writer's, deleted the prefix with the other
        # writer's final files in it (the S3 long life lost a batch so).
        pytest.importorskip("boto3", reason="the S3 client is not installed (pip install -e '.[s3]')")
        s3 = request.getfixturevalue("s3")
        metastore = request.getfixturevalue("s3_metastore")
        root, store_options = f"s3a://{s3.new_bucket()}", s3_options(s3)
        table = Table(f"{root}/events", s3)
    else:
        metastore, s3 = request.getfixturevalue("metastore"), None
        root, store_options = tmp_path.as_uri(), {}
        table = Table(str(tmp_path / "events"))
    db = f"lake_{uuid.uuid4().hex[:8]}"
    host, port = metastore.host_port
    with hmsclient.HMSClient(host=host, port=port) as client:
        client.create_database(Database(name=db, description="", locationUri=f"{root}/db", parameters={}))
    options = {"path": table.url if store == "s3" else str(tmp_path / "events"), "partitionBy": "country",
               "table": f"{db}.events", "hive.metastore.uris": metastore.uri, **store_options}
    errors: list[BaseException] = []

    def job(writer: int, round_: int, countries: list[str], start: threading.Barrier) -> None:
        try:
            sink = FileSink(FileSinkConfig.from_options(options, SCHEMA), SCHEMA)
            app = {"txnAppId": f"etl-{writer}", "txnVersion": str(round_)} if writers == "apps" else {}
            name = f"job-{round_}-{writer}"
            spec = WriteSpec.for_batch(app.get, name)
            mark = sink.prepare(spec)
            # A job's planner cannot name its write (Spark gives it no job id): its tasks do.
            write = spec.planned() or WriteId(Kind.JOB, name, 0, job=name)
            ids = [round_ * 1000 + writer * 100 + n for n in range(len(countries))]
            rows = pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()),
                                               "country": pa.array(countries, pa.string())})
            message = sink.write(Task(write, 0, 0), mark, iter([rows])).participant()
            start.wait(30)  # every writer's first registration of the round at once
            sink.commit(write, [message])
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread below
            errors.append(exc)

    # Each round: partitions no writer has registered yet, the same for every writer.
    for round_ in range(ROUNDS):
        countries = [f"r{round_}c{n:02d}" for n in range(PARTITIONS)]
        start = threading.Barrier(WRITERS)
        threads = [threading.Thread(target=job, args=(w, round_, countries, start)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        if errors:
            raise errors[0]  # with its traceback
    with hmsclient.HMSClient(host=host, port=port) as client:
        names = list(client.get_partition_names(db, "events", -1))
    assert len(names) == len(set(names)) == PARTITIONS * ROUNDS, names
    ids = [value for _directory, value in table.rows("id")]  # "_kafka_eos" is skipped
    assert len(ids) == len(set(ids)) == WRITERS * ROUNDS * PARTITIONS
