"""The sink against a real Kafka: batch and streaming writes, columns, bad input.

Bad input must fail with a clear error, leave the batch's transactions aborted (none
open under the sink's prefix) and nothing visible to read_committed readers.
"""

from __future__ import annotations

import time
import uuid

import pytest

from kafka_eos_ds.kafka_sink import abort_transactions, list_transactions
from kafka_eos_tools.topics import consume_all, create_topic, produce, unique_name

# Over librdkafka's default limit (1,000,000 bytes), within the Java producer's
# max.request.size (1,048,576 with the record's framing) and the broker's default
# message.max.bytes (1,048,588 with the batch's).
LARGE_VALUE = 1_048_000
NEGATIVE_ROWS = [["k0", "0|v", 0], ["k1", "1|v", -1], ["k2", "2|v", 1]]
NEGATIVE_SCHEMA = "key string, value string, partition int"


def _writer(df, bootstrap, topic=None, prefix=None, **options):
    w = df.write.format("kafka_eos").option("kafka.bootstrap.servers", bootstrap).mode("append")
    if topic:
        w = w.option("topic", topic)
    w = w.option("transactionalIdPrefix", prefix or f"sink-{uuid.uuid4().hex[:8]}")
    for k, v in options.items():
        w = w.option(k, v)
    return w


def _open(bootstrap, prefix):
    return [t for t in list_transactions({"bootstrap.servers": bootstrap}, prefix) if t.open]


def test_batch_write_with_all_columns(spark, kafka, new_topic):
    topic = new_topic(3)
    df = spark.createDataFrame(
        [(f"k{i}", f"{i}|v", topic, i % 3, [("h", b"x")]) for i in range(300)],
        "key string, value string, topic string, partition int, headers array<struct<key:string,value:binary>>")
    prefix = f"cols-{topic}"
    df.write.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap) \
        .option("transactionalIdPrefix", prefix).mode("append").save()
    records = consume_all(kafka.bootstrap, topic)
    assert sorted(int(r.value.split(b"|")[0]) for r in records) == list(range(300))
    assert all(r.partition == int(r.key[1:]) % 3 for r in records)
    assert all(r.headers == [("h", b"x")] for r in records)
    assert _open(kafka.bootstrap, prefix) == []


def test_streaming_write_commits_each_batch(spark, kafka, new_topic, checkpoint):
    topic = new_topic(2)
    batches = []
    q = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
         .selectExpr("cast(value as string) as key", "concat(cast(value as string), '|r') as value")
         .writeStream.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("topic", topic).option("transactionalIdPrefix", f"st-{topic}")
         .option("checkpointLocation", checkpoint).trigger(processingTime="500 milliseconds").start())
    deadline = time.monotonic() + 90
    try:
        q.processAllAvailable()
        while len([p for p in q.recentProgress if p["numInputRows"] > 0]) < 3:
            assert time.monotonic() < deadline, f"fewer than 3 batches with rows in 90s: {q.recentProgress}"
            q.awaitTermination(0.5)
    finally:
        q.stop()
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3
    ids = sorted(int(r.value.split(b"|")[0]) for r in consume_all(kafka.bootstrap, topic))
    assert len(ids) == len(set(ids)) > 0, "duplicates"
    # The rate source counts from 0 and every completed batch is committed: the output is
    # 0..n-1 without a gap, holding at least every row of the batches Spark reported.
    assert ids == list(range(len(ids))), "records lost"
    assert len(ids) >= sum(p["numInputRows"] for p in batches)


def test_at_least_once_needs_no_prefix(spark, kafka, new_topic):
    topic = new_topic()
    df = spark.createDataFrame([(f"{i}|a",) for i in range(50)], "value string")
    df.write.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", topic) \
        .option("deliveryGuarantee", "at_least_once").mode("append").save()
    assert len(consume_all(kafka.bootstrap, topic)) == 50


def _fails(write, *fragments):
    with pytest.raises(Exception) as info:
        write.save()
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text, text[-2000:]


def test_missing_value_column(spark, kafka, new_topic):
    topic = new_topic()
    _fails(_writer(spark.createDataFrame([("a",)], "key string"), kafka.bootstrap, topic),
           "ConfigError", "'value' column")
    assert consume_all(kafka.bootstrap, topic) == []


def test_wrong_column_type(spark, kafka, new_topic):
    topic = new_topic()
    _fails(_writer(spark.createDataFrame([(1,)], "value long"), kafka.bootstrap, topic),
           "Column 'value' must be string or binary, got bigint")
    _fails(_writer(spark.createDataFrame([("a", 1)], "value string, partition long"), kafka.bootstrap, topic),
           "Column 'partition' must be int")


def test_missing_prefix_and_owned_keys(spark, kafka, new_topic):
    topic = new_topic()
    df = spark.createDataFrame([("a",)], "value string")
    w = df.write.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", topic)
    _fails(w.mode("append"), "transactionalIdPrefix")
    _fails(_writer(df, kafka.bootstrap, topic, **{"kafka.transactional.id": "x"}), "kafka.transactional.id")


def test_unknown_topic(spark, kafka):
    df = spark.createDataFrame([("a",)], "value string")
    _fails(_writer(df, kafka.bootstrap, f"missing-{uuid.uuid4().hex[:8]}"), "does not exist")


def test_null_topic_aborts_the_batch(spark, kafka, new_topic):
    topic = new_topic()
    prefix = f"nulltopic-{topic}"
    rows = [(topic if i != 150 else None, f"{i}|a") for i in range(200)]
    df = spark.createDataFrame(rows, "topic string, value string").repartition(2)
    _fails(_writer(df, kafka.bootstrap, None, prefix), "null 'topic'")
    assert consume_all(kafka.bootstrap, topic) == []
    assert _open(kafka.bootstrap, prefix) == []


def test_record_over_the_brokers_max_size_aborts_the_batch(spark, kafka, new_topic):
    topic = new_topic(1, config={"max.message.bytes": "20000"})
    prefix = f"big-{topic}"
    rows = [("x" * (50_000 if i == 70 else 10)) + f"|{i}" for i in range(100)]
    df = spark.createDataFrame([(r,) for r in rows], "value string").repartition(2)
    # The client would accept it (message.max.bytes 1 MB); the topic refuses it.
    _fails(_writer(df, kafka.bootstrap, topic, prefix), "max.message.bytes")
    assert consume_all(kafka.bootstrap, topic) == []
    assert _open(kafka.bootstrap, prefix) == []


def test_broker_refusing_the_transaction_timeout(spark, kafka, new_topic):
    topic = new_topic()
    prefix = f"tmo-{topic}"
    df = spark.createDataFrame([("a",)], "value string")
    _fails(_writer(df, kafka.bootstrap, topic, prefix, **{"kafka.transaction.timeout.ms": "3600000"}),
           "kafka.transaction.timeout.ms", "transaction.max.timeout.ms")
    assert consume_all(kafka.bootstrap, topic) == []
    assert _open(kafka.bootstrap, prefix) == []


def test_transactions_tool_lists_and_aborts_a_sinks_open_transactions(kafka, new_topic):
    from confluent_kafka import Producer

    topic = new_topic()
    prefix = f"tool-{topic}"
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{prefix}-3-1"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"x")
    producer.flush(30)
    conf = {"bootstrap.servers": kafka.bootstrap}
    listed = list_transactions(conf, prefix)
    assert [(t.partition, t.attempt, t.open) for t in listed] == [(3, 1, True)]
    assert [t.transactional_id for t in abort_transactions(conf, prefix)] == [f"{prefix}-3-1"]
    assert _open(kafka.bootstrap, prefix) == []
    produce(kafka.bootstrap, topic, [b"after"])
    assert [r.value for r in consume_all(kafka.bootstrap, topic)] == [b"after"]


def test_batch_write_of_null_and_mixed_keys_headers_and_partitions(spark, kafka, new_topic):
    # Each column of the column-wise produce loop in every shape a row can have: a null
    # key, a null partition (the partitioner chooses), null, empty and several headers.
    topic = new_topic(3)
    rows = []
    for i in range(600):
        key = None if i % 5 == 0 else f"k{i}"
        partition = None if i % 2 else i % 3
        headers = [None, [], [("a", b"1")], [("a", b"1"), ("b", None)]][i % 4]
        rows.append((key, f"{i}|v", partition, headers))
    df = spark.createDataFrame(rows, "key string, value string, partition int, "
                                     "headers array<struct<key:string,value:binary>>").repartition(2)
    prefix = f"mixed-{topic}"
    _writer(df, kafka.bootstrap, topic, prefix).save()
    by_index = {int(r.value.split(b"|")[0]): r for r in consume_all(kafka.bootstrap, topic)}
    assert sorted(by_index) == list(range(600))
    for i, record in by_index.items():
        key, partition, headers = rows[i][0], rows[i][2], rows[i][3]
        assert record.key == (key.encode() if key is not None else None), i
        if partition is not None:
            assert record.partition == partition, i
        assert (record.headers or []) == [(k, v) for k, v in (headers or [])], i
    assert _open(kafka.bootstrap, prefix) == []


@pytest.fixture(scope="module")
def builtin_writes(kafka, builtin_connector):
    """The same writes through Spark's built-in sink: a row with a negative partition, and a
    record between librdkafka's and the Java producer's default size limits. Each gives the
    built-in's error or nothing."""
    negative = create_topic(kafka.bootstrap, unique_name("neg-builtin"), 3, kafka.replication())
    large = create_topic(kafka.bootstrap, unique_name("large-builtin"), 1, kafka.replication())
    spec = [{"write": NEGATIVE_ROWS, "schema": NEGATIVE_SCHEMA, "expect_error": True,
             "options": {"kafka.bootstrap.servers": kafka.bootstrap, "topic": negative}},
            {"write": [["k", "x" * LARGE_VALUE]], "expect_error": True,
             "options": {"kafka.bootstrap.servers": kafka.bootstrap, "topic": large}}]
    results = builtin_connector.run(spec)["results"]
    return {"negative": results[0], "large": results[1], "large_topic": large}


def test_a_negative_partition_fails_the_write_as_the_builtin_does(spark, kafka, new_topic, builtin_writes):
    # Spark's built-in sink: the Java ProducerRecord refuses the row, the job fails.
    assert "Invalid partition: -1" in str(builtin_writes["negative"].get("error")), builtin_writes["negative"]
    topic = new_topic(3)
    prefix = f"negpart-{topic}"
    df = spark.createDataFrame([tuple(r) for r in NEGATIVE_ROWS], NEGATIVE_SCHEMA)
    _fails(_writer(df, kafka.bootstrap, topic, prefix), "ConfigError", "Column 'partition' holds -1")
    assert consume_all(kafka.bootstrap, topic) == []  # nothing of the write is visible
    assert _open(kafka.bootstrap, prefix) == []       # and nothing is left open


def test_records_the_builtin_writes_are_written_with_default_settings(spark, kafka, new_topic, builtin_writes):
    assert builtin_writes["large"] == [], builtin_writes["large"]  # the built-in wrote it
    written = consume_all(kafka.bootstrap, builtin_writes["large_topic"], "read_uncommitted")
    assert [len(r.value) for r in written] == [LARGE_VALUE]
    topic = new_topic(1)
    df = spark.createDataFrame([("k", "x" * LARGE_VALUE)], "key string, value string")
    _writer(df, kafka.bootstrap, topic, f"large-{topic}").save()
    assert [len(r.value) for r in consume_all(kafka.bootstrap, topic)] == [LARGE_VALUE]
    # A limit the user sets is kept: the record is refused, nothing visible, nothing open.
    prefix = f"large-limited-{topic}"
    _fails(_writer(df, kafka.bootstrap, topic, prefix, **{"kafka.message.max.bytes": "1000000"}),
           "larger than Kafka accepts")
    assert len(consume_all(kafka.bootstrap, topic)) == 1
    assert _open(kafka.bootstrap, prefix) == []
