"""Client settings end to end: the user's client id, Java-style settings reaching every
client, and keys landing in the partitions Spark's built-in sink puts them in."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import pytest

from kafka_eos_ds.kafka_sink import list_transactions
from kafka_eos_ds.kafka_sink import transactional_ids as ids
from kafka_eos_tools.topics import consume_all, create_topic, produce, unique_name


# Full profile: the gate builds every client from the same settings in
# test_driver_side_clients_are_built_with_every_setting and tests/test_client_config.py.
@pytest.mark.full
def test_client_id_option_works_for_the_exactly_once_sink_and_the_source(spark, kafka, new_topic):
    """kafka.client.id once failed every batch of the exactly-once sink (the coordinator
    client got two client ids)."""
    topic = new_topic(2)
    prefix = f"cid-{uuid.uuid4().hex[:8]}"
    df = spark.createDataFrame([(f"k{i}", f"{i}|v") for i in range(200)], "key string, value string")
    df.write.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", topic) \
        .option("transactionalIdPrefix", prefix).option("kafka.client.id", "orders-etl").mode("append").save()
    assert sorted(int(r.value.split(b"|")[0]) for r in consume_all(kafka.bootstrap, topic)) == list(range(200))
    assert [t for t in list_transactions({"bootstrap.servers": kafka.bootstrap}, prefix) if t.open] == []
    read = spark.read.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap) \
        .option("subscribe", topic).option("kafka.client.id", "orders-reader").load()
    assert read.count() == 200


def test_keys_land_in_the_partitions_the_builtin_sink_chooses(spark, kafka, builtin_connector):
    rows = [[f"key-{i}-{uuid.uuid4().hex[:6]}", f"{i}|v"] for i in range(5000)]
    ours = create_topic(kafka.bootstrap, unique_name("part-ours"), 6, kafka.replication())
    theirs = create_topic(kafka.bootstrap, unique_name("part-builtin"), 6, kafka.replication())
    spark.createDataFrame(rows, "key string, value string").write.format("kafka_eos") \
        .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", ours) \
        .option("transactionalIdPrefix", f"part-{uuid.uuid4().hex[:8]}").mode("append").save()
    spec = [{"write": rows, "options": {"kafka.bootstrap.servers": kafka.bootstrap, "topic": theirs}}]
    assert builtin_connector.run(spec)["results"] == [[]]  # written

    def placement(topic):
        return {r.key: r.partition for r in consume_all(kafka.bootstrap, topic)}

    mine, builtin = placement(ours), placement(theirs)
    assert len(mine) == len(builtin) == 5000
    assert len(set(mine.values())) == 6  # the keys spread over every partition
    moved = {k: (p, builtin[k]) for k, p in mine.items() if builtin[k] != p}
    assert moved == {}


# Java-style settings a plaintext cluster ignores, but which every client must be given.
JAVA_STYLE = {
    "kafka.client.id": "settings-check",
    "kafka.sasl.mechanism": "plain",
    "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                              'username="alice" password="alice-secret";',
    "kafka.ssl.endpoint.identification.algorithm": "",
    "kafka.socket.timeout.ms": "45000",
    "kafka.client.dns.lookup": "use_all_dns_ips",
}
TRANSLATED = {"client.id": "settings-check", "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
              "sasl.password": "alice-secret", "ssl.endpoint.identification.algorithm": "none",
              "socket.timeout.ms": "45000", "client.dns.lookup": "use_all_dns_ips"}


def test_driver_side_clients_are_built_with_every_setting(kafka, new_topic, monkeypatch, tmp_path):
    """The source's and the sink's clients (metadata, offsets, group commits, a task's
    producer, commit log, transaction coordinator), run in this process against the real
    cluster, each recorded as it is built."""
    import confluent_kafka
    import confluent_kafka.admin
    import kafka.admin as kafka_python_admin
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from kafka_eos_ds.kafka_sink.config import SinkConfig
    from kafka_eos_ds.kafka_sink.sink import KafkaSink
    from kafka_eos_ds.source.group_commit import GroupOffsetCommitter
    from kafka_eos_ds.source.metadata import KafkaMetadata
    from kafka_eos_ds.source.options import SourceOptions
    from kafka_eos_ds.twophase import DoneMark, Kind, WriteId, WriteSpec
    from kafka_eos_ds.twophase.writers import Task

    topic = new_topic(2)
    produce(kafka.bootstrap, topic, [{"key": b"k", "value": b"v"}] * 10)
    built: list[tuple[str, dict]] = []

    def record(name, args, kwargs):
        built.append((name, dict(args[0]) if args else dict(kwargs)))

    for module, name in ((confluent_kafka, "Producer"), (confluent_kafka, "Consumer")):
        real = getattr(module, name)  # a C type: replaced by a recording factory
        monkeypatch.setattr(module, name,
                            lambda *a, _real=real, _name=name, **k: record(_name, a, k) or _real(*a, **k))
    for cls in (confluent_kafka.admin.AdminClient, kafka_python_admin.KafkaAdminClient):
        init = cls.__init__  # Python classes: their constructor records

        def recording_init(self, *a, _init=init, _name=cls.__name__, **k):
            record(_name, a, k)
            _init(self, *a, **k)

        monkeypatch.setattr(cls, "__init__", recording_init)

    base = {"kafka.bootstrap.servers": kafka.bootstrap, **JAVA_STYLE}
    source = SourceOptions.from_spark({**base, "subscribe": topic}, streaming=True)
    metadata = KafkaMetadata(source)
    try:
        tps = metadata.partitions()
        ends = metadata.latest(tps)
        committer = GroupOffsetCommitter(source.group_id)
        deadline = time.monotonic() + 60  # a new group's coordinator may still be loading
        while not committer.commit(metadata.consumer(), ends) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert committer.last_error is None
        assert metadata.committed(tps) == ends
    finally:
        metadata.close()
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    sink = SinkConfig.from_options({**base, "topic": topic, "transactionalIdPrefix": f"chk-{topic}",
                                    "commitLogTopic": unique_name("commits")}, schema)
    driver = KafkaSink(replace(sink, commit_timeout_s=30))
    driver.prepare(WriteSpec(streaming=True))
    write = WriteId(Kind.STREAM, "query-1", 0)
    message = driver.write(Task(write, 0, 0), DoneMark(), iter([(f"k{i}", f"{i}|v".encode()) for i in range(20)]))
    driver.commit(write, [message.participant()])
    assert sorted(r.value for r in consume_all(kafka.bootstrap, topic) if r.value != b"v") == \
        sorted(f"{i}|v".encode() for i in range(20))

    # The settings check builds clients without servers (they never connect).
    built = [(name, conf) for name, conf in built if conf.get("bootstrap.servers", conf.get("bootstrap_servers"))]
    assert any(ids.parse(f"chk-{topic}", conf.get("transactional.id") or "") for _, conf in built)  # a task's producer
    kinds = {name for name, _ in built}
    assert kinds == {"Producer", "Consumer", "AdminClient", "KafkaAdminClient"}, kinds
    for name, conf in built:
        if name == "KafkaAdminClient":
            assert (conf["client_id"], conf["sasl_plain_username"], conf["sasl_plain_password"],
                    conf["sasl_mechanism"]) == ("settings-check", "alice", "alice-secret", "PLAIN")
            continue
        expected = dict(TRANSLATED)
        if conf.get("client.id") == "kafka-eos-commit-log":  # the commit log names its producer
            expected["client.id"] = "kafka-eos-commit-log"
        if ids.parse(f"chk-{topic}", conf.get("transactional.id") or "") is not None:  # a task's producer
            assert conf["partitioner"] == "murmur2_random"
        assert {k: conf.get(k) for k in expected} == expected, name
