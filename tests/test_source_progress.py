"""Reading a batch's end offsets and the query id from a Spark checkpoint (sourceGroupId)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.kafka_sink import batch_writer
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.storage.checkpoint import Checkpoint

META = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'


def offset_log(root, batch, *sources):
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text("\n".join(["v1", META, *sources]))


def test_end_offsets_come_from_the_batchs_offset_log(tmp_path):
    offset_log(tmp_path, 0, '{"in":{"0":10,"1":7}}')
    offset_log(tmp_path, 3, '{"in":{"0":40,"1":33}}')
    checkpoint = Checkpoint.at(str(tmp_path))
    assert checkpoint.latest_batch() == 3 and checkpoint.latest_batch("commits") == -1
    assert checkpoint.end_offsets(0) == {"in": {"0": 10, "1": 7}}
    assert checkpoint.progress("g", 3) == {"group": "g", "offsets": {"in": {"0": 40, "1": 33}}}


def test_the_query_id_comes_from_the_checkpoint_metadata(tmp_path):
    assert Checkpoint.at(str(tmp_path)).query_id() is None
    (tmp_path / "metadata").write_text(json.dumps({"id": "q-1"}) + "\n")
    assert Checkpoint.at(f"file://{tmp_path}").query_id() == "q-1"


@pytest.mark.parametrize("sources, message", [
    (['{"in":{"0":1}}', '{"other":{"0":2}}'], "exactly one source"),
    ([], "exactly one source"),
    (['{"logOffset": 5}'], "not Kafka offsets"),
    (['-'], "not Kafka offsets"),
])
def test_a_query_the_option_cannot_serve_is_refused_naming_it(tmp_path, sources, message):
    offset_log(tmp_path, 0, *sources)
    with pytest.raises(ConfigError, match=message) as info:
        Checkpoint.at(str(tmp_path), option="sourceGroupId").end_offsets(0)
    assert "Option 'sourceGroupId'" in str(info.value) and "Remove 'sourceGroupId'" in str(info.value)
    # The table sink reads the same offsets for itself: its reader names no Kafka sink option.
    with pytest.raises(ConfigError, match=message) as info:
        Checkpoint.at(str(tmp_path)).end_offsets(0)
    assert "sourceGroupId" not in str(info.value)


def test_checkpoints_are_read_where_spark_keeps_them_and_other_schemes_are_named():
    from kafka_eos_ds.storage import StorageOptions, locate, readable

    for location in ("/ckpt/q", "file:///ckpt/q", "hdfs://nn:8020/ckpt/q", "viewfs://cluster/ckpt/q",
                     "s3a://bucket/ckpt/q", "s3://bucket/ckpt/q", "gs://bucket/ckpt/q"):
        assert readable(location), location
    assert not readable("abfs://c@acct.dfs.core.windows.net/ckpt")
    with pytest.raises(ConfigError, match="scheme 'abfs'.*hdfs://.*s3a://.*gs://"):
        locate("abfs://c@acct.dfs.core.windows.net/ckpt")
    # GCS is read (a checkpoint), never written: the file sink's steps need writes it cannot make there.
    with pytest.raises(ConfigError, match="reads checkpoints from but does not write to"):
        locate("gs://bucket/ckpt")
    with pytest.raises(ConfigError, match="checkpointLocation"):
        Checkpoint.at(None)
    options = StorageOptions.from_options({"fs.s3a.secret.key": "s3cr3t", "fs.s3a.endpoint": "h:9000", "topic": "x"})
    assert options.get("FS.S3A.ENDPOINT") == "h:9000" and "s3cr3t" not in repr(options) and "topic" not in repr(options)


def test_a_checkpoint_on_gcs_is_read_through_pyarrow_with_the_connectors_option_names():
    from kafka_eos_ds.storage import StorageOptions, checkpoint_files
    from kafka_eos_ds.storage.gcs import GcsFiles

    files, path = checkpoint_files("gs://bucket/ckpt/q", StorageOptions.from_options(
        {"fs.gs.storage.root.url": "http://127.0.0.1:9", "fs.gs.auth.type": "UNAUTHENTICATED"}))
    assert isinstance(files, GcsFiles) and files.url == "gs://bucket" and path == "/ckpt/q"
    # The connector's key-file option has no pyarrow counterpart: asked for in the environment, not ignored.
    with pytest.raises(ConfigError, match="fs.gs.auth.service.account.json.keyfile.*GOOGLE_APPLICATION_CREDENTIALS"):
        GcsFiles("bucket", StorageOptions.from_options({"fs.gs.auth.service.account.json.keyfile": "/k.json"}))


def test_source_group_needs_a_checkpoint_the_sink_can_read():
    with pytest.raises(ConfigError, match="sourceGroupId.*cannot be read"):
        SinkConfig.from_options({**BASE, "sourceGroupId": "g", "checkpointLocation": "abfs://c@a.dfs.core.windows.net/k"},
                                SCHEMA)
    assert SinkConfig.from_options({**BASE, "sourceGroupId": "g", "checkpointLocation": "gs://b/ckpt"},
                                   SCHEMA).source_group_id == "g"
    config = SinkConfig.from_options({**BASE, "sourceGroupId": "g", "checkpointLocation": "hdfs://nn:8020/c",
                                      "fs.s3a.access.key": "AKIA", "fs.s3a.secret.key": "s3cr3t"}, SCHEMA)
    assert config.storage.get("fs.s3a.access.key") == "AKIA" and "s3cr3t" not in repr(config)


SCHEMA = StructType([StructField("value", StringType())])
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "out", "transactionalIdPrefix": "p"}


def test_the_option_needs_exactly_once_and_a_streaming_query():
    assert SinkConfig.from_options({**BASE, "sourceGroupId": "g"}, SCHEMA).source_group_id == "g"
    with pytest.raises(ConfigError, match="exactly_once"):
        SinkConfig.from_options({**BASE, "sourceGroupId": "g", "deliveryGuarantee": "at_least_once"}, SCHEMA)
    with pytest.raises(ConfigError, match="streaming"):
        batch_writer(SCHEMA, {**BASE, "sourceGroupId": "g"}, overwrite=False)


def test_an_offset_log_that_cannot_be_read_is_named_with_the_callers_option_or_none(tmp_path):
    with pytest.raises(ConfigError, match="^Option 'sourceGroupId': cannot read Spark's offset log .*offsets/5"):
        Checkpoint.at(str(tmp_path), option="sourceGroupId").end_offsets(5)
    with pytest.raises(ConfigError, match="^Cannot read Spark's offset log .*offsets/5") as info:
        Checkpoint.at(str(tmp_path)).end_offsets(5)  # the table sink's own read
    assert "sourceGroupId" not in str(info.value)
