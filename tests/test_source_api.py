"""The source package's public names and the schema it promises."""

from __future__ import annotations

import pytest

import kafka_eos_ds.source as source
from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.source.schema import arrow_schema, check_schema, kafka_schema


def test_public_names_are_pinned():
    assert sorted(source.__all__) == ["KafkaBatchReader", "KafkaStreamReader", "source_schema"]


def test_schema_is_the_builtin_one():
    assert source.source_schema({}).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int>")
    with_headers = source.source_schema({"INCLUDEHEADERS": "true"})
    assert with_headers.fields[-1].simpleString() == "headers:array<struct<key:string,value:binary>>"
    assert all(f.nullable for f in with_headers.fields)


def test_arrow_schema_is_what_pyspark_checks_against():
    import pyarrow as pa

    schema = arrow_schema(True)
    assert schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("partition").type == pa.int32() and schema.field("offset").type == pa.int64()
    assert schema.field("headers").type == pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def test_a_user_schema_is_refused():
    check_schema(kafka_schema(False), False)
    with pytest.raises(ConfigError, match="fixed schema"):
        check_schema(kafka_schema(True), False)
