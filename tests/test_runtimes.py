"""A sink takes what it uses of its process from the runtime it is given
(docs/dev/decisions.md, "A sink's process is a runtime handed to it")."""

from __future__ import annotations

import pickle
import uuid

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from kafka_eos_ds.datasource import KafkaEosDataSource
from kafka_eos_ds.kafka.driver_session import SESSIONS
from kafka_eos_ds.kafka_sink import runtime as kafka
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.kafka_sink.sink import KafkaSink
from kafka_eos_ds.table_sink import runtime as table
from kafka_eos_ds.table_sink.config import FileSinkConfig
from kafka_eos_ds.table_sink.datasource import KafkaEosFileDataSource
from kafka_eos_ds.table_sink.sink import FileSink
from kafka_eos_ds.twophase.runtime import register, unregister
from tests.test_sink_units import OPTS, SCHEMA

ROWS = StructType([StructField("value", StringType())])


def test_a_sink_travels_to_its_tasks_with_the_default_runtime_of_the_process_it_lands_in(tmp_path):
    sinks = [KafkaSink(SinkConfig.from_options(OPTS, SCHEMA)),
             FileSink(FileSinkConfig.from_options({"path": str(tmp_path)}), ROWS)]
    for sink, default in zip(sinks, (kafka.DEFAULT, table.DEFAULT), strict=True):
        assert pickle.loads(pickle.dumps(sink)).runtime is default
    # The default keeps what the process keeps: the driver's clients, its checked options.
    assert kafka.DEFAULT.sessions is SESSIONS
    assert KafkaSink(SinkConfig.from_options(OPTS, SCHEMA)).runtime.checked is kafka.DEFAULT.checked


def test_a_tests_runtime_pickles_by_its_name_while_it_is_registered(tmp_path):
    own = table.TableRuntime("test.table", uuid4=lambda: uuid.UUID(int=7))
    sink = FileSink(FileSinkConfig.from_options({"path": str(tmp_path)}), ROWS, own)
    with pytest.raises(LookupError, match="test.table"):
        pickle.loads(pickle.dumps(sink))  # never registered
    register(own)
    try:
        with pytest.raises(ValueError, match="registered already"):
            register(table.TableRuntime("test.table"))
        assert pickle.loads(pickle.dumps(sink)).runtime is own
    finally:
        unregister(own)
    with pytest.raises(LookupError, match="test.table"):
        pickle.loads(pickle.dumps(sink))


def test_the_data_sources_hand_their_runtime_to_the_writers(tmp_path):
    drawn = uuid.UUID(int=42)
    own = table.TableRuntime("test.table", uuid4=lambda: drawn)
    writer = KafkaEosFileDataSource({"path": str(tmp_path)}, runtime=own).writer(ROWS, False)
    assert writer.sink.runtime is own
    assert writer.spec.job == drawn.hex  # a batch write's job id is the runtime's uuid
    assert KafkaEosFileDataSource({"path": str(tmp_path)}).streamWriter(ROWS, False).sink.runtime is table.DEFAULT
    own_kafka = kafka.KafkaRuntime("test.kafka")
    assert KafkaEosDataSource(dict(OPTS), runtime=own_kafka).streamWriter(SCHEMA, False).sink.runtime is own_kafka
    assert KafkaEosDataSource(dict(OPTS)).writer(SCHEMA, False).sink.runtime is kafka.DEFAULT
