"""Sink pieces without a broker: ids, commit-error classification, options and columns."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType)

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka import coordinator as c
from kafka_eos_ds.kafka import transactional_ids as ids
from kafka_eos_ds.kafka.commit_outcome import classify_described, classify_end_txn
from kafka_eos_ds.kafka.coordinator import TxnState
from kafka_eos_ds.kafka.decision_log import partition_for
from kafka_eos_ds.sink.config import DEFAULT_TRANSACTION_TIMEOUT_MS, SinkConfig
from kafka_eos_ds.twophase import Outcome


def test_transactional_ids_round_trip_and_reject_other_sinks():
    assert ids.build("etl", 3, 1) == "etl-3-1"
    assert ids.parse("etl", "etl-3-1") == ids.TransactionalId("etl", 3, 1)
    assert ids.parse("etl", "etl-2-3-1") is None       # sink "etl-2"
    assert ids.parse("etl", "etlx-3-1") is None
    assert ids.parse("etl", "etl-3") is None
    assert ids.lower_attempts("etl", 4, 2) == ["etl-4-0", "etl-4-1"]
    import re
    assert re.match(ids.pattern("a.b"), "a.b-1-0") and not re.match(ids.pattern("a.b"), "axb-1-0")


def test_prefix_must_be_a_readable_name():
    with pytest.raises(ConfigError, match="transactionalIdPrefix"):
        ids.check_prefix("has space")


@pytest.mark.parametrize("code, outcome", [
    (c.NONE, Outcome.COMMITTED),
    (c.NOT_COORDINATOR, Outcome.RETRY), (c.COORDINATOR_NOT_AVAILABLE, Outcome.RETRY),
    (c.COORDINATOR_LOAD_IN_PROGRESS, Outcome.RETRY), (c.CONCURRENT_TRANSACTIONS, Outcome.RETRY),
    (c.REQUEST_TIMED_OUT, Outcome.RETRY),
    (c.INVALID_PRODUCER_EPOCH, None), (c.PRODUCER_FENCED, None), (c.INVALID_TXN_STATE, None),
    (c.INVALID_PRODUCER_ID_MAPPING, None),
])
def test_end_txn_codes(code, outcome):
    assert classify_end_txn(code) is outcome


def test_end_txn_errors_that_retrying_cannot_fix_raise_with_their_name():
    with pytest.raises(KafkaClientError, match="transactionalIdPrefix"):
        classify_end_txn(c.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaClientError, match="error code 87"):
        classify_end_txn(87)


@pytest.mark.parametrize("state, outcome", [
    (None, Outcome.LOST),
    (TxnState("t", "CompleteCommit", 5, 2), Outcome.COMMITTED),
    (TxnState("t", "PrepareCommit", 5, 2), Outcome.RETRY),
    (TxnState("t", "CompleteAbort", 5, 2), Outcome.LOST),
    (TxnState("t", "PrepareAbort", 5, 2), Outcome.LOST),
    (TxnState("t", "CompleteAbort", 5, 3), Outcome.LOST),   # timed out: epoch bumped
    (TxnState("t", "Empty", 5, 4), Outcome.LOST),           # fenced afterwards
    (TxnState("t", "CompleteCommit", 6, 0), Outcome.LOST),  # another producer id
])
def test_described_outcomes(state, outcome):
    assert classify_described(state, 5, 2) is outcome


def test_decision_partition_is_stable():
    assert partition_for("etl", 1) == 0
    assert partition_for("etl", 8) == partition_for("etl", 8)


SCHEMA = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
OPTS = {"kafka.bootstrap.servers": "b:9092", "topic": "out", "transactionalIdPrefix": "etl"}


def test_sink_config_defaults():
    cfg = SinkConfig.from_options(OPTS, SCHEMA)
    assert cfg.exactly_once and cfg.prefix == "etl" and cfg.topic == "out"
    assert cfg.transaction_timeout_ms == DEFAULT_TRANSACTION_TIMEOUT_MS
    assert cfg.columns.value == 1 and cfg.columns.key == 0 and cfg.columns.topic == -1


def test_exactly_once_needs_a_prefix():
    with pytest.raises(ConfigError, match="transactionalIdPrefix"):
        SinkConfig.from_options({"kafka.bootstrap.servers": "b", "topic": "t"}, SCHEMA)
    cfg = SinkConfig.from_options({"kafka.bootstrap.servers": "b", "topic": "t",
                                   "deliveryGuarantee": "at_least_once"}, SCHEMA)
    assert not cfg.exactly_once


@pytest.mark.parametrize("key", ["transactional.id", "enable.idempotence", "key.serializer", "value.serializer"])
def test_connector_owned_kafka_keys_are_refused(key):
    with pytest.raises(ConfigError, match=f"kafka.{key}"):
        SinkConfig.from_options({**OPTS, f"kafka.{key}": "x"}, SCHEMA)


def test_transaction_timeout_is_taken_from_the_kafka_options():
    cfg = SinkConfig.from_options({**OPTS, "kafka.transaction.timeout.ms": "60000"}, SCHEMA)
    assert cfg.transaction_timeout_ms == 60000 and "transaction.timeout.ms" not in cfg.producer
    with pytest.raises(ConfigError, match="kafka.transaction.timeout.ms"):
        SinkConfig.from_options({**OPTS, "kafka.transaction.timeout.ms": "soon"}, SCHEMA)


def test_exactly_once_refuses_weak_acks():
    with pytest.raises(ConfigError, match="kafka.acks"):
        SinkConfig.from_options({**OPTS, "kafka.acks": "1"}, SCHEMA)


@pytest.mark.parametrize("fields, match", [
    ([StructField("key", StringType())], "'value' column"),
    ([StructField("value", LongType())], "Column 'value' must be string or binary, got bigint"),
    ([StructField("value", StringType()), StructField("key", LongType())], "Column 'key'"),
    ([StructField("value", StringType()), StructField("partition", LongType())], "Column 'partition' must be int"),
    ([StructField("value", StringType()), StructField("topic", BinaryType())], "Column 'topic' must be string"),
    ([StructField("value", StringType()), StructField("headers", ArrayType(StringType()))], "Column 'headers'"),
])
def test_bad_columns_are_named(fields, match):
    with pytest.raises(ConfigError, match=match):
        SinkConfig.from_options(OPTS, StructType(fields))


def test_a_topic_is_required_from_the_option_or_a_column():
    schema = StructType([StructField("value", StringType())])
    with pytest.raises(ConfigError, match="option 'topic'"):
        SinkConfig.from_options({k: v for k, v in OPTS.items() if k != "topic"}, schema)
    headers = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
    ok = StructType([StructField("value", StringType()), StructField("topic", StringType()),
                     StructField("partition", IntegerType()), StructField("headers", headers)])
    cfg = SinkConfig.from_options({k: v for k, v in OPTS.items() if k != "topic"}, ok)
    assert (cfg.columns.topic, cfg.columns.partition, cfg.columns.headers) == (1, 2, 3)
