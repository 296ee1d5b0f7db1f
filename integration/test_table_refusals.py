"""A partition the Hive metastore refuses (real metastore, real Spark): the batch is
refused before its decision, nothing of it becomes final, and the next write to the
table is not held back by it."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.storage  # starts a metastore: the gate's second lane

pytest.importorskip("hmsclient", reason="the metastore client is not installed (pip install -e '.[hive]')")


def test_a_partition_value_the_metastore_refuses_fails_the_write_with_nothing_final(spark, metastore, tmp_path):
    from hmsclient import hmsclient
    from hmsclient.genthrift.hive_metastore.ttypes import Database

    db = f"lake_{uuid.uuid4().hex[:8]}"
    host, port = metastore.host_port
    with hmsclient.HMSClient(host=host, port=port) as client:
        client.create_database(Database(name=db, description="", locationUri=(tmp_path / "db").as_uri(),
                                         parameters={}))
    out = tmp_path / "events"

    def write(values):
        df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "id long, part string")
        (df.write.format("kafka_eos_file").mode("append").option("path", str(out)).option("partitionBy", "part")
         .option("table", f"{db}.events").option("hive.metastore.uris", metastore.uri).save())

    # The metastore keeps a partition value in a column of 256 characters: a longer one is refused,
    # before the batch is decided (the value is also too long for a local directory name, which
    # the commit's move would meet after the decision).
    with pytest.raises(Exception, match="was not committed.*Hive metastore refused") as info:
        write(["fr", "x" * 400])
    assert "TransactionError" in str(info.value)
    assert not list(out.rglob("part-*"))  # nothing of the refused batch is final
    write(["fr", "de"])  # the table is not held back by the refused batch
    assert len(list(out.rglob("part-*"))) == 2
    with hmsclient.HMSClient(host=host, port=port) as client:
        assert sorted(client.get_partition_names(db, "events", -1)) == ["part=de", "part=fr"]
