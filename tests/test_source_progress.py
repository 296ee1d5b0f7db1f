"""Reading a batch's end offsets and the query id from a Spark checkpoint (sourceGroupId)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.sink import source_progress
from kafka_eos_ds.sink.config import SinkConfig
from kafka_eos_ds.sink import batch_writer

META = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'


def offset_log(root, batch, *sources):
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text("\n".join(["v1", META, *sources]))


def test_end_offsets_come_from_the_batchs_offset_log(tmp_path):
    offset_log(tmp_path, 0, '{"in":{"0":10,"1":7}}')
    offset_log(tmp_path, 3, '{"in":{"0":40,"1":33}}')
    assert source_progress.latest_batch(tmp_path) == 3
    assert source_progress.end_offsets(tmp_path, 0) == {"in": {"0": 10, "1": 7}}
    assert source_progress.progress("g", tmp_path, 3) == {"group": "g", "offsets": {"in": {"0": 40, "1": 33}}}


def test_the_query_id_comes_from_the_checkpoint_metadata(tmp_path):
    assert source_progress.query_id(tmp_path) is None
    (tmp_path / "metadata").write_text(json.dumps({"id": "q-1"}) + "\n")
    assert source_progress.query_id(tmp_path) == "q-1"


@pytest.mark.parametrize("sources, message", [
    (['{"in":{"0":1}}', '{"other":{"0":2}}'], "exactly one source"),
    ([], "exactly one source"),
    (['{"logOffset": 5}'], "not Kafka offsets"),
    (['-'], "not Kafka offsets"),
])
def test_a_query_the_option_cannot_serve_is_refused_naming_it(tmp_path, sources, message):
    offset_log(tmp_path, 0, *sources)
    with pytest.raises(ConfigError, match=message) as info:
        source_progress.end_offsets(tmp_path, 0)
    assert "sourceGroupId" in str(info.value)


def test_only_local_checkpoints_are_accepted(tmp_path):
    assert source_progress.checkpoint_dir(str(tmp_path)) == tmp_path
    assert source_progress.checkpoint_dir(f"file://{tmp_path}") == tmp_path
    with pytest.raises(ConfigError, match="local checkpointLocation"):
        source_progress.checkpoint_dir("s3a://bucket/ckpt")
    with pytest.raises(ConfigError, match="checkpointLocation"):
        source_progress.checkpoint_dir(None)


SCHEMA = StructType([StructField("value", StringType())])
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "out", "transactionalIdPrefix": "p"}


def test_the_option_needs_exactly_once_and_a_streaming_query():
    assert SinkConfig.from_options({**BASE, "sourceGroupId": "g"}, SCHEMA).source_group_id == "g"
    with pytest.raises(ConfigError, match="exactly_once"):
        SinkConfig.from_options({**BASE, "sourceGroupId": "g", "deliveryGuarantee": "at_least_once"}, SCHEMA)
    with pytest.raises(ConfigError, match="streaming"):
        batch_writer(SCHEMA, {**BASE, "sourceGroupId": "g"}, overwrite=False)
