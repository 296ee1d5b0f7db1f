"""Sink pieces without a broker: ids, commit-error classification, options and columns."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka import coordinator as c
from kafka_eos_ds.kafka.coordinator import TxnState
from kafka_eos_ds.kafka_sink import transactional_ids as ids
from kafka_eos_ds.kafka_sink.commit_outcome import classify_described, classify_end_txn
from kafka_eos_ds.kafka_sink.config import DEFAULT_TRANSACTION_TIMEOUT_MS, SinkConfig
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.twophase import Outcome
from tests.sink_fakes import kafka_runtime
from tests.test_twophase import FakeLog


def test_transactional_ids_round_trip_and_reject_other_sinks():
    assert ids.build("etl", 3, 1) == "etl-3-1"
    assert ids.parse("etl", "etl-3-1") == ids.TransactionalId("etl", "", 3, 1)
    assert ids.parse("etl", "etl-2-3-1") is None       # sink "etl-2"
    assert ids.parse("etl", "etlx-3-1") is None
    assert ids.parse("etl", "etl-3") is None
    assert ids.lower_attempts("etl", 4, 2) == ["etl-4-0", "etl-4-1"]
    import re
    assert re.match(ids.pattern("a.b"), "a.b-1-0") and not re.match(ids.pattern("a.b"), "axb-1-0")


def test_transactional_id_families_keep_writers_of_one_prefix_apart():
    import re
    job = ids.build("etl", 3, 1, "j1a2b3c4d")
    assert job == "etl:j1a2b3c4d-3-1" and ids.parse("etl", job) == ids.TransactionalId("etl", "j1a2b3c4d", 3, 1)
    with pytest.raises(ConfigError):  # ':' never occurs in a prefix: a family never reads as another prefix
        ids.check_prefix("etl:j1a2b3c4d")
    assert ids.lower_attempts("etl", 4, 2, "fab") == ["etl:fab-4-0", "etl:fab-4-1"]
    # The stream's own listing never sees a job's ids, nor a job's listing the stream's ...
    assert not re.match(ids.pattern("etl"), job) and not re.match(ids.pattern("etl", "j1a2b3c4d"), "etl-3-1")
    # ... and a foreachBatch recovery selects every run of its stream, no other writer.
    assert re.match(ids.pattern("etl", "fab*"), "etl:fab12-0-0") and not re.match(ids.pattern("etl", "fab*"), job)
    assert ids.in_families("etl", "etl:fab12-0-0", "fab*") and not ids.in_families("etl", "etl-0-0", "fab*")
    assert re.match(ids.any_family("etl"), job) and re.match(ids.any_family("etl"), "etl-0-0")
    assert ids.decision_writer("etl") == "etl.decisions" and ids.decision_writer("etl", "fab") == "etl:fab.decisions"


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
    (TxnState("t", "CompleteCommit", 5, 2), Outcome.COMMITTED),
    (TxnState("t", "PrepareCommit", 5, 2), Outcome.RETRY),
    (TxnState("t", "Ongoing", 5, 1), Outcome.RETRY),          # a coordinator still loading
    # Proof of an abort: our transaction, at its own epoch, aborted.
    (TxnState("t", "CompleteAbort", 5, 2), Outcome.LOST),
    (TxnState("t", "PrepareAbort", 5, 2), Outcome.LOST),
    (TxnState("t", "PrepareEpochFence", 5, 2), Outcome.LOST),
    # Not proof: each also follows a successful commit.
    (None, Outcome.UNKNOWN),                                  # expired (transactional.id.expiration.ms)
    (TxnState("t", "CompleteCommit", 6, 0), Outcome.UNKNOWN), # re-created under another producer id
    (TxnState("t", "Empty", 5, 3), Outcome.UNKNOWN),          # initialised again after the commit
    (TxnState("t", "CompleteAbort", 5, 3), Outcome.UNKNOWN),  # a timeout abort, or a later transaction's
    (TxnState("t", "Empty", 5, 4), Outcome.UNKNOWN),
    (TxnState("t", "Empty", 5, 2), Outcome.UNKNOWN),          # no transaction at our epoch to judge
])
def test_described_outcomes(state, outcome):
    assert classify_described(state, 5, 2) is outcome


def test_the_decision_writers_id_is_never_a_task_id():
    # Recovery and abort fence every open id matching the task pattern; the decision
    # writer must never be among them (it is fenced only by the next decision writer).
    import re

    for prefix in ("etl", "etl-1", "a.b_c"):
        writer = ids.decision_writer(prefix)
        assert writer == f"{prefix}.decisions"
        assert ids.parse(prefix, writer) is None
        assert not re.match(ids.pattern(prefix), writer)
        assert ids.parse("etl", writer) is None


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


def test_open_ids_are_the_sinks_ongoing_transactions_only():
    """Recovery aborts what is Ongoing; a transaction already committing or aborting (the
    last batch's, markers still being written) ends by itself and is left alone."""
    from kafka_eos_ds.kafka_sink.participants import KafkaTransactions

    class Listing:
        def list_transactions(self, id_regex):
            return [("etl-0-0", 7, "Ongoing"), ("etl-1-0", 8, "PrepareCommit"), ("etl-2-0", 9, "PrepareAbort"),
                    ("etl-3-1", 10, "Ongoing"), ("etl-x-0", 11, "Ongoing"), ("etl-2-4-0", 12, "Ongoing")]

    from kafka_eos_ds.twophase import Kind, WriteId

    stream = WriteId(Kind.STREAM, "q", 1)
    assert KafkaTransactions(Listing(), "etl", 60_000).open_ids(stream) == ["etl-0-0", "etl-3-1"]


class _ScriptedProducer:
    """Stands in for confluent_kafka.Producer in a task: records the calls in order; its
    statistics report the producer id only when served (poll/flush), as librdkafka's do."""

    calls: list = []

    def __init__(self, conf):
        self.conf = conf
        _ScriptedProducer.calls = [("new", conf)]

    def _serve(self):
        if "stats_cb" in self.conf:  # a transactional producer's
            self.conf["stats_cb"]('{"eos": {"idemp_state": "Assigned", "producer_id": 42, "producer_epoch": 3}}')

    def list_topics(self, topic=None, timeout=None):
        self.calls.append(("metadata", topic))

    def init_transactions(self, timeout):
        self.calls.append("init")

    def begin_transaction(self):
        self.calls.append("begin")

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0, headers=None):
        # confluent_kafka.Producer.produce's signature: the writer passes key and
        # partition positionally.
        self.calls.append(("produce", topic, value, key))

    def poll(self, timeout=0):
        self.calls.append("poll")
        self._serve()
        return 0

    def flush(self, timeout=None):
        self.calls.append("flush")
        self._serve()
        return 0


@pytest.mark.parametrize("options, backoff", [({}, 10), ({"kafka.reconnect.backoff.ms": "250"}, "250")])
def test_task_producer_connects_before_init_and_reads_its_id_after_the_flush(monkeypatch, caplog, options,
                                                                             backoff):
    import confluent_kafka
    import pyarrow as pa

    from kafka_eos_ds.kafka_sink.task_writer import write_partition
    from kafka_eos_ds.twophase import Kind, WriteId
    from kafka_eos_ds.twophase.protocol import DoneMark
    from kafka_eos_ds.twophase.writers import Task

    monkeypatch.setattr(confluent_kafka, "Producer", _ScriptedProducer)
    cfg = SinkConfig.from_options({**OPTS, **options}, SCHEMA)
    rows = pa.record_batch([pa.array(["k1", "k2"]), pa.array([b"v1", b"v2"])], names=["key", "value"])
    msg = write_partition(cfg, Task(WriteId(Kind.STREAM, "q", 5), 0, 0), DoneMark(), iter([rows]))
    new, *calls = _ScriptedProducer.calls
    conf = new[1]
    assert conf["transactional.id"] == "etl-0-0" and conf["reconnect.backoff.ms"] == backoff
    # librdkafka's lines go to Python logging, through the task's own logger (which keeps
    # the line that says why a transaction failed).
    with caplog.at_level(logging.INFO, logger="kafka_eos_ds.librdkafka"):
        conf["logger"].log(logging.INFO, "%s [%s] %s", "INIT", "rdkafka#producer-1", "a line")
    assert [r.name for r in caplog.records] == ["kafka_eos_ds.librdkafka"]
    # Connected first (the second metadata request leaves a learned broker up), then init.
    assert calls[:4] == [("metadata", "out"), ("metadata", "out"), "init", "begin"]
    # The producer id is not awaited before producing (no polling between begin and the
    # rows); it is read after the flush, from the statistics served meanwhile.
    assert calls[4:6] == [("produce", "out", b"v1", "k1"), ("produce", "out", b"v2", "k2")]
    assert calls[-1] == "flush" and set(calls[6:]) <= {"poll", "flush"}
    assert (msg.transactional_id, msg.producer_id, msg.epoch, msg.records) == ("etl-0-0", 42, 3, 2)


@pytest.mark.parametrize("options, connects", [
    ({"deliveryGuarantee": "at_least_once"}, [("metadata", "out"), ("metadata", "out")]),  # idempotent
    ({"deliveryGuarantee": "at_least_once", "kafka.acks": "1"}, []),  # not idempotent: no producer id to wait for
])
def test_an_idempotent_task_producer_connects_before_its_first_record(monkeypatch, options, connects):
    """An idempotent producer asks for its producer id before sending anything; unconnected,
    that waited for librdkafka's 500 ms retry timer in every task (producer_start)."""
    import confluent_kafka
    import pyarrow as pa

    from kafka_eos_ds.kafka_sink.task_writer import write_partition
    from kafka_eos_ds.twophase import Kind, WriteId
    from kafka_eos_ds.twophase.protocol import DoneMark
    from kafka_eos_ds.twophase.writers import Task

    monkeypatch.setattr(confluent_kafka, "Producer", _ScriptedProducer)
    _ScriptedProducer.calls = []
    cfg = SinkConfig.from_options({**OPTS, **options}, SCHEMA)
    rows = pa.record_batch([pa.array(["k1"]), pa.array([b"v1"])], names=["key", "value"])
    msg = write_partition(cfg, Task(WriteId(Kind.STREAM, "q", 5), 0, 0), DoneMark(), iter([rows]))
    new, *calls = _ScriptedProducer.calls
    assert "transactional.id" not in new[1] and new[1]["enable.idempotence"] is (connects != [])
    assert calls[:len(connects) + 1] == [*connects, ("produce", "out", b"v1", "k1")]
    assert msg.records == 1


@pytest.mark.parametrize("key, value", [("no.such.setting", "1"), ("linger.ms", "soon"), ("acks", "some")])
def test_every_producer_setting_is_checked_by_librdkafka_on_the_driver(key, value):
    with pytest.raises(ConfigError, match=f"'kafka.{key}'"):
        SinkConfig.from_options({**OPTS, "deliveryGuarantee": "at_least_once", f"kafka.{key}": value}, SCHEMA)


@pytest.mark.parametrize("acks", ["0", "1", "all", "-1"])
@pytest.mark.parametrize("retries", ["0", "3", "2147483647"])
def test_at_least_once_takes_the_builtin_acks_and_retries(acks, retries):
    cfg = SinkConfig.from_options({**OPTS, "deliveryGuarantee": "at_least_once", "kafka.acks": acks,
                                   "kafka.retries": retries}, SCHEMA)
    assert (cfg.producer["acks"], cfg.producer["retries"]) == (acks, retries)


def test_sink_config_prints_without_secrets():
    cfg = SinkConfig.from_options({**OPTS, "kafka.security.protocol": "SASL_PLAINTEXT",
                                   "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config":
                                   'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                   'username="u" password="hunter2";'}, SCHEMA)
    assert cfg.producer["sasl.password"] == "hunter2"
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg) and "[redacted]" in repr(cfg)


@pytest.mark.parametrize("value, message", [("soon", "'commitTimeoutMs'"), ("500", "'commitTimeoutMs'.*1000")])
def test_the_commit_timeout_is_checked_with_the_other_options(value, message):
    assert SinkConfig.from_options({**OPTS, "commitTimeoutMs": "5000"}, SCHEMA).commit_timeout_s == 5.0
    assert SinkConfig.from_options(OPTS, SCHEMA).commit_timeout_s == 120.0
    with pytest.raises(ConfigError, match=message):  # before the sink is built, as every other option
        SinkConfig.from_options({**OPTS, "commitTimeoutMs": value}, SCHEMA)


def test_batch_overwrite_is_refused_as_in_the_builtin():
    from kafka_eos_ds.kafka_sink import batch_writer

    with pytest.raises(ConfigError, match="'overwrite'.*append"):
        batch_writer(SCHEMA, OPTS, overwrite=True)


def test_the_coordinator_client_takes_the_users_client_id():
    """kafka.client.id once made the coordinator client fail with "got multiple values
    for keyword argument 'client_id'"."""
    built = []

    def admin(**settings):
        built.append(settings)

    for conf in ({"bootstrap.servers": "b:9092", "client.id": "mine"}, {"bootstrap.servers": "b:9092"}):
        c.TransactionCoordinator(conf, admin_factory=admin, channel_factory=lambda client: None)
    assert [b["client_id"] for b in built] == ["mine", "kafka-eos-coordinator"]


@pytest.mark.parametrize("acks, retries", [("1", "3"), ("0", "0"), ("all", "0")])
def test_at_least_once_task_producer_starts_with_the_builtin_acks_and_retries(acks, retries):
    """The task producer once always enabled idempotence, which librdkafka refuses with
    acks other than all (or retries 0): every task of such a query failed."""
    from kafka_eos_ds.kafka_sink.task_writer import _PartitionWriter

    cfg = SinkConfig.from_options({**OPTS, "kafka.bootstrap.servers": "127.0.0.1:1", "deliveryGuarantee":
                                   "at_least_once", "kafka.acks": acks, "kafka.retries": retries}, SCHEMA)
    writer = _PartitionWriter(cfg, 0, 0)
    writer._open()  # no transaction: nothing connects yet
    assert writer.producer is not None
    writer.producer = None


def test_settings_the_coordinator_client_cannot_use_are_refused_with_the_options():
    opts = {**OPTS, "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                                      "required unsecuredLoginStringClaim_sub=\"alice\";"}
    with pytest.raises(ConfigError, match="OAUTHBEARER without 'kafka.sasl.oauthbearer.method=oidc'"):
        SinkConfig.from_options(opts, SCHEMA)
    SinkConfig.from_options({**opts, "deliveryGuarantee": "at_least_once"}, SCHEMA)  # no coordinator client


def test_header_lists_reads_each_rows_headers_from_the_flat_columns():
    import pyarrow as pa

    from kafka_eos_ds.kafka_sink.task_writer import _header_lists

    kind = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    column = pa.chunked_array([
        pa.array([[{"key": "a", "value": b"1"}], None], kind),
        pa.array([[], [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]], kind),
    ])
    assert _header_lists(column) == [[("a", b"1")], None, None, [("a", b"1"), ("b", None)]]
    # A slice keeps its parent's offsets: the rows must still line up.
    assert _header_lists(column.chunk(1).slice(1)) == [[("a", b"1"), ("b", None)]]


def test_unfit_names_each_transaction_that_can_no_longer_commit_and_the_options_to_change():
    """Before the decision: still Ongoing under the task's producer id and epoch, with time
    left before the broker's timeout abort; otherwise the batch is refused."""
    import time

    from kafka_eos_ds.kafka.coordinator import TxnState
    from kafka_eos_ds.kafka_sink.participants import KafkaTransactions
    from kafka_eos_ds.twophase import Participant

    now_ms = int(time.time() * 1000)
    states = {
        "etl-0-0": TxnState("etl-0-0", "Ongoing", 7, 3, now_ms - 1_000, 60_000),        # fine
        "etl-1-0": TxnState("etl-1-0", "Ongoing", 8, 3, now_ms - 55_000, 60_000),       # 5 s left
        "etl-2-0": TxnState("etl-2-0", "Empty", 9, 4, -1, 60_000),                      # fenced by a zombie
        "etl-3-0": TxnState("etl-3-0", "CompleteAbort", 10, 3, now_ms - 70_000, 60_000),
    }

    class Coordinator:
        def describe_many(self, ids):
            return {tid: states.get(tid) for tid in ids}

    def part(i, pid, epoch=3):
        return Participant(f"etl-{i}-0", i, 0, 5, KafkaHandle(pid, epoch))

    txns = KafkaTransactions(Coordinator(), "etl", 60_000)
    assert txns.unfit([part(0, 7)], 15) is None
    problem = txns.unfit([part(0, 7), part(1, 8), part(2, 9), part(3, 10), part(4, 11)], 15)
    assert problem.startswith("4 of its 5 transaction(s)")
    assert "etl-0-0" not in problem
    assert "etl-1-0: open for 55.0s of its 60.0s timeout, 15.0s needed" in problem
    assert "etl-2-0: now held by producer 9 epoch 4, not the task's 9 epoch 3" in problem
    assert "etl-3-0: CompleteAbort, not Ongoing" in problem and "etl-4-0: unknown" in problem
    assert "kafka.transaction.timeout.ms" in problem and "maxOffsetsPerTrigger" in problem
    # A margin longer than the timeout would refuse every batch: at most half of it.
    short = KafkaTransactions(Coordinator(), "etl", 8_000)
    states["etl-5-0"] = TxnState("etl-5-0", "Ongoing", 12, 3, now_ms - 2_000, 8_000)
    assert short.unfit([part(5, 12)], 15) is None


def test_task_producer_log_keeps_why_the_transaction_failed(caplog):
    """A producer refused WRITE on a topic reports its records only as purged; the cause
    is in librdkafka's TXNERR log line, which the task's error must carry."""
    import logging

    from confluent_kafka import KafkaError
    from confluent_kafka import Producer as RealProducer

    from kafka_eos_ds.kafka.errors import producer_error
    from kafka_eos_ds.kafka_sink.task_writer import _TxnLog

    log = _TxnLog()
    producer = RealProducer({"bootstrap.servers": "127.0.0.1:1", "logger": log, "debug": "broker",
                             "socket.connection.setup.timeout.ms": 1000})
    with caplog.at_level(logging.DEBUG, logger="kafka_eos_ds.librdkafka"):
        producer.poll(0.5)
    assert caplog.records, "librdkafka's lines reach Python logging through the task's logger"
    log.log(logging.ERROR, "%s [%s] %s", "TXNERR", "rdkafka#producer-1",
            "Current transaction failed in state InTransaction: Failed to add partition(s) to transaction: "
            "Broker: Topic authorization failed (TOPIC_AUTHORIZATION_FAILED)")
    conf = SinkConfig.from_options(OPTS, SCHEMA).producer
    error = producer_error(KafkaError(KafkaError._PURGE_QUEUE), conf, topic="out", undelivered=100,
                           txn_failure=log.failure)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(error) and "grant" in str(error) and not error.retriable
    other = producer_error(KafkaError(KafkaError._PURGE_QUEUE), conf, topic="out", undelivered=100,
                           txn_failure="Broker: boom")
    assert "the transaction failed: Broker: boom" in str(other)


class _DescribingCoordinator:
    """Stands in for the transaction coordinators: DescribeTransactions answers only."""

    def __init__(self, states):
        self.states = states

    def describe_many(self, ids):
        return {tid: self.states.get(tid) for tid in ids}

    def close(self):
        pass


def _fence_free(log):
    """The in-memory decision log of the protocol tests, as the sink's driver steps use it."""
    log.events, log.fence_writers, log.close = [], lambda: None, lambda: None
    log.ensure_topic = lambda metadata: 1
    log.position = lambda: len(log.records)  # the commit log's offsets: one per record
    return log


@pytest.mark.parametrize("timeout_ms, open_s, refused", [
    (900_000, 880, True),   # 20 s left: less than the decision write plus commitTimeoutMs
    (900_000, 700, False),  # 200 s left: the whole commit fits
    (30_000, 5, False),     # a margin longer than the timeout is capped at half of it
    (30_000, 16, True),
])
def test_a_batch_is_decided_only_with_time_left_for_the_decision_write_and_the_commits_retries(
        monkeypatch, timeout_ms, open_s, refused):
    """After the decision the driver may spend the decision write's bound and then
    commitTimeoutMs retrying each commit (a coordinator moving); a transaction the broker
    aborts for its timeout meanwhile is lost for good. So the batch is refused, undecided,
    unless every transaction has that much time left (at most half of its timeout: a
    longer margin would refuse every batch)."""
    import time

    from kafka_eos_ds.errors import TransactionError
    from kafka_eos_ds.kafka_sink import sink as kafka_sink
    from kafka_eos_ds.twophase import Participant
    from kafka_eos_ds.twophase.identity import Kind, WriteId

    now_ms = int(time.time() * 1000)
    coordinator = _DescribingCoordinator({"etl-0-0": TxnState("etl-0-0", "Ongoing", 7, 3, now_ms - open_s * 1000,
                                                              timeout_ms)})
    logs = []
    # The fake log needs no topics.
    runtime = kafka_runtime(lambda conf, **_: coordinator,
                            lambda *a, **k: logs.append(_fence_free(FakeLog())) or logs[-1])
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "commit", lambda self, p: Outcome.COMMITTED)
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "open_ids", lambda self, *a: [])
    config = SinkConfig.from_options({**OPTS, "kafka.transaction.timeout.ms": str(timeout_ms)}, SCHEMA)
    sink = kafka_sink.KafkaSink(replace(config, commit_timeout_s=120), runtime=runtime)
    write = WriteId(Kind.STREAM, "q", 1)
    participant = Participant("etl-0-0", 0, 0, 5, KafkaHandle(7, 3))
    if refused:
        with pytest.raises(TransactionError, match="was not committed: 1 of its 1 .*needed to commit"):
            sink.commit(write, [participant])
        assert logs[0].records == []  # refused before the decision
    else:
        sink.commit(write, [participant])
        assert [d.state.value for _, d in logs[0].records] == ["decided", "done"]


def test_an_unknown_outcome_names_what_the_coordinator_shows_and_what_to_check():
    from kafka_eos_ds.kafka_sink.participants import KafkaTransactions
    from kafka_eos_ds.twophase import Participant

    class Coordinator:
        def end_txn(self, tid, pid, epoch, commit):
            return c.PRODUCER_FENCED

        def describe(self, tid):
            return TxnState(tid, "Empty", 7, 4) if tid == "etl-0-0" else None

    txns = KafkaTransactions(Coordinator(), "etl", 900_000)
    parts = [Participant(f"etl-{i}-0", i, 0, 5, KafkaHandle(7, 3)) for i in (0, 1)]
    assert [txns.commit(p) for p in parts] == [Outcome.UNKNOWN, Outcome.UNKNOWN]
    message = txns.unknown_outcome_message(parts)
    assert "etl-0-0 ran under producer 7 epoch 3, its coordinator now shows producer 7 epoch 4, Empty" in message
    assert "etl-1-0 ran under producer 7 epoch 3, its coordinator no longer knows the id" in message
    for named in ("kafka.transaction.timeout.ms", "transaction.max.timeout.ms", "transactional.id.expiration.ms",
                  "read_committed"):
        assert named in message
    # What to check and how to go on: the troubleshooting section (tests/test_structure.py
    # checks it exists), not a runbook in the message.
    assert 'docs/troubleshooting.md, "TransactionError: Cannot tell whether batch N of query Q committed"' in message
    assert "not in the output" not in message


@pytest.mark.parametrize("code", [c.GROUP_AUTHORIZATION_FAILED, c.TOPIC_AUTHORIZATION_FAILED])
def test_offsets_the_principal_may_not_commit_refuse_the_batch_naming_the_option_and_the_grant(code):
    """Review #6: a sink whose principal lacks READ on the source group (or its topics)
    gets an error naming 'sourceGroupId' and the grant, at the attach step, which comes
    before the decision: the batch is refused undecided instead of wedged decided."""
    from kafka_eos_ds.kafka.coordinator import TransactionCoordinator
    from kafka_eos_ds.kafka_sink.participants import KafkaTransactions
    from kafka_eos_ds.twophase import Participant

    class Coordinator:
        def describe(self, tid):
            return TxnState(tid, "Ongoing", 7, 3)

        def send_offsets(self, tid, pid, epoch, group, offsets):
            TransactionCoordinator._raise_for(code, f"AddOffsetsToTxn({tid}, group {group!r})")

    txns = KafkaTransactions(Coordinator(), "etl", 60_000)
    first = Participant("etl-0-0", 0, 0, 5, KafkaHandle(7, 3))
    with pytest.raises(ConfigError) as raised:
        txns.carry({"group": "orders", "offsets": {"in": {"0": 5}}}, first)
    message = str(raised.value)
    assert "'sourceGroupId'" in message and "READ on group 'orders'" in message and "['in']" in message
    assert "AuthorizationFailed" in message and not raised.value.retriable

    class Unavailable(Coordinator):
        def send_offsets(self, tid, pid, epoch, group, offsets):
            TransactionCoordinator._raise_for(c.COORDINATOR_NOT_AVAILABLE, "AddOffsetsToTxn")

    # Any other error stays what it was (here: retriable, for the committer to retry).
    with pytest.raises(KafkaClientError) as other:
        KafkaTransactions(Unavailable(), "etl", 60_000).carry({"group": "orders", "offsets": {}}, first)
    assert other.value.retriable and not isinstance(other.value, ConfigError)


def test_a_transaction_at_the_last_producer_epoch_is_warned_about_before_the_decision(caplog):
    """Brokers before 4.1.0 with transaction version 2 overflow the epoch when they abort
    a transaction at the last epoch (a fence, a timeout): the driver, which sees every
    task's epoch, warns so that a hanging transaction has its explanation in the log."""
    from kafka_eos_ds.kafka_sink.participants import LAST_EPOCH, KafkaTransactions
    from kafka_eos_ds.twophase import Participant

    class Coordinator:
        def describe_many(self, ids):
            return {}

    txns = KafkaTransactions(Coordinator(), "etl", 900_000)
    at = [Participant(f"etl-{i}-0", i, 0, 5, KafkaHandle(7, e))
          for i, e in enumerate((LAST_EPOCH - 1, LAST_EPOCH))]
    with caplog.at_level(logging.WARNING, logger="kafka_eos_ds.kafka_sink.participants"):
        txns.unfit(at, 15)
    warned = [r.getMessage() for r in caplog.records if "last before" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("etl-1-0 runs at producer epoch 32766")
    assert "4.1.0" in warned[0] and "transaction.version" in warned[0]


@pytest.mark.parametrize("arrow", [True, False])
def test_a_negative_partition_fails_the_task_before_its_rows_are_produced(arrow):
    """Spark's built-in sink refuses a negative partition (its ProducerRecord does); it
    must not silently go to the partitioner."""
    import pyarrow as pa
    from pyspark.sql import Row

    from kafka_eos_ds.kafka_sink.task_writer import _PartitionWriter

    schema = StructType([StructField("value", StringType()), StructField("partition", IntegerType())])
    writer = _PartitionWriter(SinkConfig.from_options(OPTS, schema), 0, 0)
    rows = [("c", -2), ("a", 1), ("b", None)]  # rows (pyspark 4.0) are checked one by one
    items = ([pa.RecordBatch.from_pydict({"value": [r[0] for r in rows], "partition": [r[1] for r in rows]})]
             if arrow else [Row(value=v, partition=p) for v, p in rows])
    with pytest.raises(ConfigError, match=r"Column 'partition' holds -2 .* 0 or more, or null"):
        writer.write_all(items)
    assert writer.producer is None  # refused before a transaction was opened for the rows


def test_a_task_s_transaction_handle_reads_back_from_its_decision_record():
    import json

    from kafka_eos_ds.kafka_sink.messages import KafkaCommitMessage
    from kafka_eos_ds.twophase.identity import Kind, WriteId
    from kafka_eos_ds.twophase.protocol import Participant

    message = KafkaCommitMessage(WriteId(Kind.STREAM, "q", 3), 2, 1, 10, "fab", "etl:fab-2-1", 4001, 7)
    stored = Participant.from_json(json.loads(json.dumps(message.participant().to_json())), KafkaHandle.from_json)
    assert stored.handle == KafkaHandle(4001, 7, "fab")
    # A task without a transaction keeps its family (its earlier attempts' ids get fenced).
    empty = KafkaCommitMessage(WriteId(Kind.STREAM, "q", 3), 2, 1, 0, "fab")
    assert empty.participant().records == 0 and empty.participant().handle.family == "fab"
    with pytest.raises(KeyError):  # a handle without its producer is a corrupt record, not epoch -1
        KafkaHandle.from_json({"family": "fab"})


@pytest.mark.parametrize("flaky", ["cluster metadata", "coordinator client", "commit-log topic",
                                   "commit-log writer", "pre-decision check"])
def test_every_setup_step_of_a_driver_step_is_retried_when_it_fails_transiently(monkeypatch, flaky):
    """A broker restarting answers the first request of a step with a retriable error for
    a moment. Each setup step of the driver's commit (the cluster's topics, the coordinator
    client, the commit-log topic, fencing the commit-log writer) and the check before the
    decision is retried, so the batch commits (review finding 10 found some of them unretried)."""
    import time

    from kafka_eos_ds.errors import KafkaClientError
    from kafka_eos_ds.kafka_sink import sink as kafka_sink
    from kafka_eos_ds.twophase import Participant
    from kafka_eos_ds.twophase.identity import Kind, WriteId

    failures = {flaky: 1}

    def once(step, answer=None):
        def call(*_args, **_kwargs):
            if failures.get(step):
                failures[step] -= 1
                raise KafkaClientError(f"{step}: the broker is restarting", retriable=True)
            return answer() if callable(answer) else answer
        return call

    now_ms = int(time.time() * 1000)
    coordinator = _DescribingCoordinator({"etl-0-0": TxnState("etl-0-0", "Ongoing", 7, 3, now_ms, 900_000)})
    coordinator.refresh = lambda: None
    coordinator.describe_many = once("pre-decision check", lambda: {"etl-0-0": coordinator.states["etl-0-0"]})
    logs = []

    def decision_log(*_args, **_kwargs):
        log = _fence_free(FakeLog())
        log.ensure_topic, log.fence_writers = once("commit-log topic", 1), once("commit-log writer")
        logs.append(log)
        return log

    # Its own kept clients (none from an earlier test): it builds its coordinator client.
    runtime = kafka_runtime(once("coordinator client", lambda: coordinator), decision_log, once("cluster metadata"))
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "commit", lambda self, p: Outcome.COMMITTED)
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "open_ids", lambda self, *a: [])
    sink = kafka_sink.KafkaSink(replace(SinkConfig.from_options(OPTS, SCHEMA), commit_timeout_s=30), runtime=runtime)
    sink.commit(WriteId(Kind.STREAM, "q", 1), [Participant("etl-0-0", 0, 0, 5, KafkaHandle(7, 3))])
    assert failures[flaky] == 0  # the step did fail once ...
    assert [d.state.value for _, d in logs[-1].records] == ["decided", "done"]  # ... and the batch committed
