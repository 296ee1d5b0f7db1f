"""Kafka to Hive: the file sink writes a partitioned table on HDFS and registers each
batch's partitions in a Hive metastore, before its decision and again once its files are
final (real MiniDFSCluster, Hive metastore and Kafka; Spark with Hive support reads the
table back).

The crash case kills the driver after a batch's files are final and before the batch is
recorded done (crash point 4): its partitions were registered before its decision, the
restart's recovery registers them again (adding nothing), and a reader of the metastore
table sees every input record exactly once.
"""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.storage  # starts HDFS and a metastore: the gate's second lane

pytest.importorskip("hmsclient", reason="the metastore client is not installed (pip install -e '.[hive]')")
pytest.importorskip("hdfs_native", reason="the HDFS client is not installed (pip install -e '.[hdfs]')")

from integration.sink_runs import assert_crashed, run_pipeline, seed  # noqa: E402
from integration.spark_driver import SparkDriver  # noqa: E402
from integration.tables import Table  # noqa: E402

RECORDS, BATCH = 450, 150
# A chunk of 50 record ids: each batch (150 offsets over 2 partitions, ids in order per
# partition) brings chunks no earlier batch had, so what a batch registered can be told.
COLUMNS = ["timestamp", "cast(split(value, '[|]')[0] as int) div 50 as chunk"]
PARTITION_BY = "dt=date(timestamp),chunk"


def _client(metastore):
    from hmsclient import hmsclient

    host, port = metastore.host_port
    return hmsclient.HMSClient(host=host, port=port)


def test_a_kafka_to_hive_pipeline_registers_every_partition_once_across_a_driver_crash(kafka, hdfs, metastore,
                                                                                       new_topic, tmp_path,
                                                                                       warm_driver):
    from hmsclient.genthrift.hive_metastore.ttypes import Database

    topic = new_topic(2, prefix="hive")
    seed(kafka.bootstrap, topic, RECORDS)
    db = f"lake_{uuid.uuid4().hex[:8]}"
    with _client(metastore) as client:
        client.create_database(Database(name=db, description="", locationUri=(tmp_path / "db").as_uri(),
                                         parameters={}))
    table = Table(hdfs.path("events"))
    columns = [arg for c in COLUMNS for arg in ("--column", c)]
    options = [f"path={table.url}", f"partitionBy={PARTITION_BY}", f"table={db}.events",
               f"hive.metastore.uris={metastore.uri}", "successFile=true"]

    def run(fault=None):
        return run_pipeline(kafka.bootstrap, topic, "unused", str(tmp_path / "checkpoint"), "unused", fault=fault,
                            max_offsets=BATCH, log_dir=tmp_path / "logs", sink_format="kafka_eos_file",
                            sink_options=options, job_args=columns, warm=warm_driver)

    assert_crashed(run("driver-after-all-commits@1"))
    assert table.visible() == 2 * BATCH and table.pending() == []  # batches 0 and 1 final
    # ... and batch 1's partitions registered too: they are registered before its decision.
    with _client(metastore) as client:
        before = set(client.get_partition_names(db, "events", -1))
    assert before == {d for d, _ in table.rows()}
    finished = run()
    assert finished.returncode == 0, finished.log[-3000:]
    report = table.audit(RECORDS)
    assert report.ok and report.leftovers == [], report

    directories = sorted({d for d, _ in table.rows()})
    with _client(metastore) as client:
        created = client.get_table(db, "events")
        registered = sorted(client.get_partition_names(db, "events", -1))
    # The table was created from the DataFrame's schema: its columns, its partition keys.
    assert [(c.name, c.type) for c in created.sd.cols] == [("key", "binary"), ("value", "string"),
                                                          ("timestamp", "timestamp")]
    assert [(k.name, k.type) for k in created.partitionKeys] == [("dt", "string"), ("chunk", "bigint")]
    assert created.sd.location == table.url
    assert registered == directories  # each partition the table has files in (batch 1's by the restart)
    assert sorted(f.rsplit("/", 1)[0] for f in table.files() if f.endswith("/_SUCCESS")) == directories

    conf = {"spark.sql.catalogImplementation": "hive", "spark.hadoop.hive.metastore.uris": metastore.uri}
    with SparkDriver(conf, tmp_path / "hive-reader.log") as spark:
        rows = spark.run(f"result = [r[0] for r in spark.table('{db}.events').select('value').collect()]")
        chunks = spark.run(f"result = sorted(r[0] for r in spark.sql('SELECT DISTINCT chunk FROM {db}.events')"
                           ".collect())")
    ids = sorted(int(v.split("|", 1)[0]) for v in rows)
    assert ids == list(range(RECORDS))  # every record exactly once, through the metastore
    assert chunks == list(range(RECORDS // 50))


def test_an_existing_table_with_other_partition_columns_is_refused_before_anything_is_written(spark, metastore,
                                                                                             tmp_path):
    from hmsclient.genthrift.hive_metastore.ttypes import Database

    from integration.hive_tables import external_parquet_table

    db = f"lake_{uuid.uuid4().hex[:8]}"
    with _client(metastore) as client:
        client.create_database(Database(name=db, description="", locationUri=(tmp_path / "db").as_uri(),
                                         parameters={}))
        client.create_table(external_parquet_table(db, "events", (tmp_path / "events").as_uri()))  # by dt
    out = tmp_path / "events"
    writer = (spark.range(0, 10).selectExpr("id", "cast(id % 2 as string) as part").write.format("kafka_eos_file")
              .mode("append").option("path", str(out)).option("partitionBy", "part")
              .option("table", f"{db}.events").option("hive.metastore.uris", metastore.uri))
    with pytest.raises(Exception, match="partitioned by \\(dt\\)") as info:
        writer.save()
    assert "ConfigError" in str(info.value)
    assert not list(out.glob("part=*"))
