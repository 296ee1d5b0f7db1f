"""The kafka_eos source against real Kafka and real Spark, side by side with the built-in.

Topics are small (a few hundred records) so the module runs in about two minutes on two
cores; the SparkSession is the shared ``spark`` fixture, and Spark's built-in connector
runs once, in a child process, for every comparison (see ``integration/builtin_rows.py``).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from integration.builtin_rows import normalized
from kafka_eos_tools.topics import end_offsets, produce

NOW_MS = int(time.time() * 1000)
PAST_END = 150  # a start offset past the end of a partition of 100 records


def plain_records(n: int, partitions: int) -> list[dict]:
    """Null keys and values, headers with nulls and repeated keys, explicit timestamps."""
    out = []
    for i in range(n):
        rec = {"partition": i % partitions, "timestamp": NOW_MS - 3_600_000 + i}
        rec["key"] = None if i % 7 == 0 else f"k{i}".encode()
        rec["value"] = None if i % 11 == 0 else f"{i}|v{i}".encode()
        if i % 3 == 1:
            rec["headers"] = [("h", f"a{i}".encode()), ("h", None), ("other", b"")]
        out.append(rec)
    return out


def produce_transactions(bootstrap: str, topic: str, partitions: int) -> int:
    """Committed and aborted transactions; ends with an aborted one. Returns committed records."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"src-test-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    committed = 0
    for round_, commit in enumerate([True, False, True, False, True, False]):
        producer.begin_transaction()
        for i in range(25):
            producer.produce(topic, value=f"{round_}-{i}|{'c' if commit else 'a'}".encode(),
                             key=f"{i}".encode(), partition=i % partitions)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
            committed += 25
        else:
            producer.abort_transaction(30)
    return committed


def kafka_eos_reader(spark, bootstrap: str, topic: str, stream: bool = False, **opts):
    reader = spark.readStream if stream else spark.read
    return reader.format("kafka_eos").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic) \
        .options(**{k: str(v) for k, v in opts.items()})


def run_available_now(df, checkpoint: str, timeout: float = 120) -> list[list[tuple]]:
    """Run to completion with Trigger.AvailableNow; the normalized rows of each batch."""
    batches: list[list[tuple]] = []
    headers = "headers" in df.columns

    def collect(batch_df, batch_id):
        batches.append(normalized(batch_df, headers))

    query = df.writeStream.foreachBatch(collect).trigger(availableNow=True) \
        .option("checkpointLocation", checkpoint).start()
    try:
        assert query.awaitTermination(timeout), "query did not finish"
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise query.exception()
    return batches


def run_until(df, checkpoint: str, rows: int, timeout: float = 120) -> tuple[list[list[tuple]], list[int]]:
    """Run with a processing-time trigger (any pyspark line) until ``rows`` rows arrived:
    the normalized rows of each batch, and the offsets each batch that moved spanned."""
    batches: list[list[tuple]] = []
    ids: list[int] = []
    headers = "headers" in df.columns

    def collect(batch_df, batch_id):
        batches.append(normalized(batch_df, headers))
        ids.append(batch_id)

    def reported() -> bool:  # progress is posted after the batch, so it may lag its rows
        last = query.lastProgress
        return bool(last) and last["batchId"] >= ids[-1]

    query = df.writeStream.foreachBatch(collect).trigger(processingTime="200 milliseconds") \
        .option("checkpointLocation", checkpoint).start()
    deadline = time.monotonic() + timeout
    try:
        while (sum(len(b) for b in batches) < rows or not reported()) and query.exception() is None:
            assert time.monotonic() < deadline, f"only {sum(len(b) for b in batches)} of {rows} rows in {timeout} s"
            time.sleep(0.2)
        spans = [span for span in (_span(p["sources"][0]) for p in query.recentProgress) if span]
    finally:
        query.stop()
    if query.exception() is not None:
        raise query.exception()
    return batches, spans


def _span(source: dict) -> int:
    from kafka_eos_tools.demo.job import progress_offsets

    def offsets(value):
        return {(t, p): o for t, parts in progress_offsets(value).items() for p, o in parts.items()}

    start, end = offsets(source["startOffset"]), offsets(source["endOffset"])
    return sum(o - start.get(tp, 0) for tp, o in end.items())


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def topics(kafka, builtin_connector):
    """Two topics read by both connectors, and the built-in's rows for them."""
    from kafka_eos_tools.topics import create_topic, unique_name

    conf = {"retention.ms": "-1"}  # explicit timestamps are an hour old; keep them
    plain = create_topic(kafka.bootstrap, unique_name("src-plain"), 3, kafka.replication(), conf)
    txn = create_topic(kafka.bootstrap, unique_name("src-txn"), 2, kafka.replication(), conf)
    produce(kafka.bootstrap, plain, plain_records(300, 3))
    committed = produce_transactions(kafka.bootstrap, txn, 2)
    base = {"kafka.bootstrap.servers": kafka.bootstrap, "includeHeaders": "true",
            "kafka.isolation.level": "read_committed", "startingOffsets": "earliest"}
    spec = [{"options": {**base, "subscribe": plain}}, {"options": {**base, "subscribe": txn}},
            # Partition 0 holds 100 records: a start at 150 is past its end.
            {"options": {**base, "subscribe": plain, "failOnDataLoss": "false",
                         "startingOffsets": json.dumps({plain: {"0": PAST_END, "1": 0, "2": 0}})},
             "expect_error": True}]
    out = builtin_connector.run(spec)
    builtin = [[tuple(r) for r in rows] for rows in out["results"][:2]]
    return {"plain": plain, "txn": txn, "committed": committed, "builtin_plain": builtin[0],
            "builtin_txn": builtin[1], "builtin_past_end": out["results"][2], "connector": out["connector"]}


def test_batch_read_equals_builtin_row_for_row(spark, kafka, topics):
    ours = normalized(kafka_eos_reader(spark, kafka.bootstrap, topics["plain"], includeHeaders="true").load())
    assert len(ours) == 300
    assert ours == topics["builtin_plain"]
    # The fixture's records really contain the awkward cases.
    assert any(r[0] is None for r in ours) and any(r[1] is None for r in ours)
    # to_json drops null fields: a header with a null value shows as {"key":"h"}.
    assert any(r[7] and '{"key":"h"},' in r[7] for r in ours)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_batch_read_starting_after_its_end_is_refused_as_by_the_builtin(spark, kafka, topics, fail_on_data_loss):
    """Not a deleted topic (data loss, skipped with failOnDataLoss=false): the read's own
    bounds are wrong, and the built-in refuses the read whatever failOnDataLoss says."""
    # The built-in refuses before reading: "The resolved start offset 150 is greater than the
    # resolved end offset 100 ..." (4.2; earlier lines: "Beginning offset ... is after the
    # ending offset ...").
    refused = str(topics["builtin_past_end"].get("error"))
    assert "is greater than the resolved end offset" in refused or "is after the ending offset" in refused, refused
    plain = topics["plain"]
    starting = json.dumps({plain: {"0": PAST_END, "1": 0, "2": 0}})
    with pytest.raises(Exception) as info:
        kafka_eos_reader(spark, kafka.bootstrap, plain, startingOffsets=starting,
                         failOnDataLoss=fail_on_data_loss).load().count()
    text = str(info.value)
    assert "ConfigError" in text and f"{plain}-0 starts at offset {PAST_END}, after its end offset 100" in text, text
    assert "'startingOffsets'" in text and "'endingOffsets'" in text and f"{plain}-1" not in text


# On 4.0 (oldest) and the newest line: the source's one branch by pyspark line is who applies
# the read limits (the reader before 4.2, Spark from 4.2); 4.1 and 4.2 run the source in the
# crash test's pipeline (test_sink_crash.py point 3).
@pytest.mark.oldest
def test_batch_read_of_aborted_transactions_equals_builtin_read_committed(spark, kafka, topics):
    df = kafka_eos_reader(spark, kafka.bootstrap, topics["txn"], includeHeaders="true").load()
    ours = normalized(df)
    assert len(ours) == topics["committed"] == 75
    assert ours == topics["builtin_txn"]
    assert all(json_value_endswith(r[1], b"|c") for r in ours)


def json_value_endswith(b64: str, suffix: bytes) -> bool:
    import base64

    return base64.b64decode(b64).endswith(suffix)


def test_schema_equals_builtin(spark, kafka, topics):
    df = kafka_eos_reader(spark, kafka.bootstrap, topics["plain"], includeHeaders="true").load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")


def test_available_now_with_admission_control_equals_builtin(spark, kafka, topics, checkpoint):
    df = kafka_eos_reader(spark, kafka.bootstrap, topics["txn"], stream=True, includeHeaders="true",
                          startingOffsets="earliest", maxOffsetsPerTrigger=40).load()
    batches = run_available_now(df, checkpoint)
    rows = sorted((r for b in batches for r in b), key=lambda r: (r[2], r[3], r[4]))
    assert rows == topics["builtin_txn"]
    # 75 committed records over 75+75+6 markers' worth of offsets: at most 40 offsets a batch.
    assert len([b for b in batches if b]) >= 4
    assert all(len(b) <= 40 for b in batches)


@pytest.mark.oldest
def test_streaming_read_of_aborted_transactions_in_bounded_batches(spark, kafka, topics, checkpoint):
    # On 4.0 (and 4.1) Spark passes no read limits and the reader caps each batch itself
    # from the end it returned last; on the newest line Spark passes them.
    df = kafka_eos_reader(spark, kafka.bootstrap, topics["txn"], stream=True, includeHeaders="true",
                          startingOffsets="earliest", maxOffsetsPerTrigger=40).load()
    batches, spans = run_until(df, checkpoint, rows=topics["committed"])
    rows = sorted((r for b in batches for r in b), key=lambda r: (r[2], r[3], r[4]))
    assert rows == topics["builtin_txn"]
    # 75 committed records over 156 offsets (aborted records and markers); the last
    # committed ones lie past offset 130 of the two partitions' 156: at least 4 batches.
    assert len(spans) >= 4 and max(spans) <= 40, spans


def test_restart_resumes_at_next_offset_and_group_follows(spark, kafka, new_topic, checkpoint):
    topic = new_topic(partitions=2)
    produce(kafka.bootstrap, topic, [{"value": f"{i}|a".encode(), "partition": i % 2} for i in range(40)])
    df = kafka_eos_reader(spark, kafka.bootstrap, topic, stream=True, startingOffsets="earliest",
                          groupIdPrefix="restart-test").load()
    first = [r for b in run_available_now(df, checkpoint) for r in b]
    assert len(first) == 40
    produce(kafka.bootstrap, topic, [{"value": f"{i}|b".encode(), "partition": i % 2} for i in range(40, 70)])
    second = [r for b in run_available_now(df, checkpoint) for r in b]
    # Exactly the new offsets: 20..34 in each partition, nothing re-read, nothing skipped.
    assert sorted((r[3], r[4]) for r in second) == sorted((p, o) for p in range(2) for o in range(20, 35))
    # The consumer group holds the consumed ends (what lag tools read).
    from kafka_eos_ds.source.options import SourceOptions

    group = SourceOptions.from_spark({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic,
                                      "groupIdPrefix": "restart-test"}, streaming=True).group_id
    assert group_offsets(kafka.bootstrap, group, topic, 2) == end_offsets(kafka.bootstrap, topic) == {0: 35, 1: 35}


def test_starting_offsets_group_resumes_from_committed(spark, kafka, new_topic, tmp_path):
    topic = new_topic(partitions=1)
    produce(kafka.bootstrap, topic, [f"{i}|x".encode() for i in range(10)])
    # A group the user names gets lag commits only when asked (commitOffsetsToGroup).
    opts = {"kafka.group.id": f"lag-{topic}", "startingOffsets": "group", "commitOffsetsToGroup": "true"}
    df = kafka_eos_reader(spark, kafka.bootstrap, topic, stream=True, **opts).load()
    # No committed offsets yet: falls back to earliest.
    assert len([r for b in run_available_now(df, str(tmp_path / "c1")) for r in b]) == 10
    assert group_offsets(kafka.bootstrap, f"lag-{topic}", topic, 1) == {0: 10}
    produce(kafka.bootstrap, topic, [f"{i}|y".encode() for i in range(10, 15)])
    # A new checkpoint (e.g. lost) starting from the group reads only what is new.
    rows = [r for b in run_available_now(df, str(tmp_path / "c2")) for r in b]
    assert [r[4] for r in rows] == [10, 11, 12, 13, 14]


def test_new_partitions_are_read_from_earliest(spark, kafka, new_topic, checkpoint):
    topic = new_topic(partitions=1)
    produce(kafka.bootstrap, topic, [f"{i}|x".encode() for i in range(5)])
    df = kafka_eos_reader(spark, kafka.bootstrap, topic, stream=True, startingOffsets="earliest").load()
    assert len([r for b in run_available_now(df, checkpoint) for r in b]) == 5
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    time.sleep(2)  # metadata propagation
    produce(kafka.bootstrap, topic, [{"value": f"{i}|n".encode(), "partition": 1 + i % 2} for i in range(6)])
    rows = [r for b in run_available_now(df, checkpoint) for r in b]
    assert sorted((r[3], r[4]) for r in rows) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]


def test_fail_on_data_loss(spark, kafka, new_topic, tmp_path):
    from confluent_kafka.admin import AdminClient as Admin

    topic = new_topic(partitions=1)
    produce(kafka.bootstrap, topic, [f"{i}|x".encode() for i in range(10)])
    ckpt = str(tmp_path / "ckpt")
    df = kafka_eos_reader(spark, kafka.bootstrap, topic, stream=True, startingOffsets="earliest").load()
    assert len([r for b in run_available_now(df, ckpt) for r in b]) == 10
    produce(kafka.bootstrap, topic, [f"{i}|y".encode() for i in range(10, 30)])
    admin = Admin({"bootstrap.servers": kafka.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 20)]).values():
        future.result(30)
    with pytest.raises(Exception) as failure:
        run_available_now(df, ckpt)
    text = str(failure.value)
    assert "DataLossError" in text and f"Offsets 10 to 20 of {topic}-0 were deleted" in text
    lenient = kafka_eos_reader(spark, kafka.bootstrap, topic, stream=True, startingOffsets="earliest",
                               failOnDataLoss="false").load()
    rows = [r for b in run_available_now(lenient, ckpt) for r in b]
    assert [r[4] for r in rows] == list(range(20, 30))


def test_latest_is_the_last_stable_offset(spark, kafka, new_topic):
    topic = new_topic(partitions=1)
    produce(kafka.bootstrap, topic, [f"{i}|x".encode() for i in range(5)])
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"open-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"{5 + i}|open".encode())
    producer.flush(30)
    try:
        started = time.monotonic()
        rows = normalized(kafka_eos_reader(spark, kafka.bootstrap, topic).load(), headers=False)
        assert [r[4] for r in rows] == [0, 1, 2, 3, 4]
        assert time.monotonic() - started < 60
        dirty = normalized(kafka_eos_reader(spark, kafka.bootstrap, topic,
                                            **{"kafka.isolation.level": "read_uncommitted"}).load(), headers=False)
        assert len(dirty) == 10
    finally:
        producer.abort_transaction(30)


def test_bad_options_fail_before_reading(spark, kafka):
    with pytest.raises(Exception, match="kafka.auto.offset.reset"):
        spark.read.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap) \
            .option("subscribe", "x").option("kafka.auto.offset.reset", "earliest").load().collect()


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(spark, kafka, new_topic, checkpoint):
    topic = new_topic(partitions=1)
    produce(kafka.bootstrap, topic, [f"{i}|x".encode() for i in range(10)])
    seen: list[tuple[float, int]] = []
    df = kafka_eos_reader(spark, kafka.bootstrap, topic, stream=True, startingOffsets="earliest",
                          minOffsetsPerTrigger=50, maxTriggerDelay="6s").load()
    query = df.writeStream.foreachBatch(lambda b, i: seen.append((time.monotonic(), b.count()))) \
        .trigger(processingTime="500 milliseconds").option("checkpointLocation", checkpoint).start()
    started = time.monotonic()
    try:
        deadline = started + 60
        while not any(n for _, n in seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        first_rows = next((t, n) for t, n in seen if n)
        # 10 < 50 records: held back until maxTriggerDelay passed, then read at once.
        assert first_rows[1] == 10 and first_rows[0] - started >= 4.0
        produce(kafka.bootstrap, topic, [f"{i}|y".encode() for i in range(10, 70)])
        produced = time.monotonic()
        while sum(n for _, n in seen) < 70 and time.monotonic() < deadline:
            time.sleep(0.2)
        # 60 >= 50: admitted at the next trigger, without waiting for the delay.
        assert sum(n for _, n in seen) == 70 and seen[-1][0] - produced < 4.0
    finally:
        query.stop()


def test_pattern_assign_and_timestamp_positions(spark, kafka, new_topic):
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    a = new_topic(partitions=2, prefix=prefix, config={"retention.ms": "-1"})
    b = new_topic(partitions=1, prefix=prefix, config={"retention.ms": "-1"})
    base = NOW_MS - 600_000
    for topic in (a, b):
        produce(kafka.bootstrap, topic, [{"value": f"{i}|{topic}".encode(), "partition": 0,
                                          "timestamp": base + i * 1000} for i in range(10)])
    by_pattern = normalized(spark.read.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap)
                            .option("subscribePattern", f"{prefix}-.*").load(), headers=False)
    assert sorted({r[2] for r in by_pattern}) == sorted([a, b]) and len(by_pattern) == 20
    assigned = normalized(spark.read.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap)
                          .option("assign", json.dumps({a: [0]})).load(), headers=False)
    assert {(r[2], r[3]) for r in assigned} == {(a, 0)} and len(assigned) == 10
    # Records 4..6 by timestamp (start inclusive, end exclusive as offsets).
    window = normalized(kafka_eos_reader(spark, kafka.bootstrap, b, startingTimestamp=base + 4000,
                                         endingTimestamp=base + 7000).load(), headers=False)
    assert [r[4] for r in window] == [4, 5, 6]
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy=latest"):
        kafka_eos_reader(spark, kafka.bootstrap, b, startingTimestamp=NOW_MS + 3_600_000).load().collect()
    late = kafka_eos_reader(spark, kafka.bootstrap, b, startingTimestamp=NOW_MS + 3_600_000,
                            startingOffsetsByTimestampStrategy="latest").load()
    assert late.count() == 0
    with pytest.raises(Exception, match="must name exactly the partitions"):
        kafka_eos_reader(spark, kafka.bootstrap, a, startingOffsets=json.dumps({a: {"0": 0}})).load().collect()


def test_executor_read_of_deleted_offsets_follows_fail_on_data_loss(kafka, new_topic):
    """Offsets deleted between planning and reading: the task sees it, not only the planner."""
    from kafka_eos_ds.errors import DataLossError
    from kafka_eos_ds.source.planning import KafkaInputPartition, OffsetRange, ReadConfig
    from kafka_eos_ds.source.reading import read_partition

    topic = new_topic(partitions=1)
    produce(kafka.bootstrap, topic, [f"{i}|x".encode() for i in range(30)])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 20)]).values():
        future.result(30)
    conf = {"bootstrap.servers": kafka.bootstrap, "isolation.level": "read_committed"}
    planned = OffsetRange(topic, 0, 5, 25)  # planned before the deletion
    with pytest.raises(DataLossError, match=f"Offsets 5 to 20 of {topic}-0 were deleted"):
        list(read_partition(KafkaInputPartition((planned,), ReadConfig(conf, "g", poll_timeout_ms=30_000))))
    lenient = ReadConfig(conf, "g", fail_on_data_loss=False, poll_timeout_ms=30_000)
    batches = list(read_partition(KafkaInputPartition((planned,), lenient)))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(20, 25))


def test_the_latest_offsets_stay_right_while_a_killed_brokers_partitions_change_leaders(kafka3):
    """Found by the full chaos run (built-in sink, mixed bounces): while a killed broker's
    partitions changed leaders, ListOffsets answered some of them -1001 without an error,
    which the source took for their latest offset ("went backwards": a false data loss),
    or FENCED_LEADER_EPOCH, which failed the query. Both came at every kill of a probe (9
    of 9). The planner's lookup must answer each partition's real end throughout."""
    import threading

    from kafka_eos_ds.source.metadata import KafkaMetadata
    from kafka_eos_ds.source.options import SourceOptions
    from kafka_eos_tools.topics import create_topic, unique_name

    topic = create_topic(kafka3.bootstrap, unique_name("leaders"), 6, 3, {"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": kafka3.bootstrap, "acks": "all"})
    for i in range(600):
        producer.produce(topic, str(i).encode(), partition=i % 6)
    assert producer.flush(30) == 0
    metadata = KafkaMetadata(SourceOptions.from_spark({"kafka.bootstrap.servers": kafka3.bootstrap,
                                                       "subscribe": topic}, streaming=True))
    partitions = sorted(metadata.partitions())
    expected = {tp: 100 for tp in partitions}
    answers, errors, stop = [], [], threading.Event()  # answers: (asked at, answered at, offsets)

    def ask() -> None:
        while not stop.is_set():
            asked = time.monotonic()
            try:
                offsets = metadata.latest(partitions)
                answers.append((asked, time.monotonic(), offsets))
            except Exception as exc:  # collected: the test reports it
                errors.append(exc)
            time.sleep(0.01)

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    try:
        _wait_for(lambda: answers, 30)
        killed = time.monotonic()
        kafka3.cluster.kill(2)  # it leads about a third of the partitions
        time.sleep(12)
        restarted = time.monotonic()
        kafka3.cluster.restart(2)
        _wait_for(lambda: sum(asked > restarted for asked, _, _ in answers) >= 10 or errors, 60)
    finally:
        stop.set()
        asker.join(60)
        metadata.close()
    assert errors == []
    assert all(offsets == expected for _, _, offsets in answers), \
        [offsets for _, _, offsets in answers if offsets != expected][:3]
    # A lookup in flight while the broker was down waits until its partitions have a
    # leader again: with the killed node one of the three controllers too, that took the
    # whole 12 s here (measured: 14.9 s), so what is asserted is that such a lookup came
    # back right (above), and that lookups went on after the restart.
    stalls = [round(done - asked, 1) for asked, done, _ in answers]
    assert any(asked < restarted and done > killed for asked, done, _ in answers), stalls
    assert sum(asked > restarted for asked, _, _ in answers) >= 10, stalls


def _wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
