"""Small Kafka helpers for the tests, the benchmarks and the demo: create topics, produce
records, read them back.

``consume_all`` reads every partition of a topic up to the end offsets taken when it is
called (for read_committed: the last stable offset), so it returns exactly what was
visible at that moment, however the records are spread.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list | None
    timestamp: int


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication: int = 1,
                 config: dict | None = None, client: dict | None = None) -> str:
    """``client``: extra client settings (a secured cluster's admin credentials)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    fut = admin.create_topics([NewTopic(name, partitions, replication, config=config or {})],
                              operation_timeout=30)
    fut[name].result(60)
    # Metadata reaches every broker a moment after creation; wait until leaders exist.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
            p.leader >= 0 for p in md.partitions.values()
        ):
            return name
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} has no leaders after 30s")


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def produce(bootstrap: str, topic: str, records: Iterable[Any], **conf: Any) -> int:
    """Produce records: bytes/str values, or dicts with value/key/partition/headers/timestamp."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    count = 0
    for rec in records:
        if not isinstance(rec, dict):
            rec = {"value": rec}
        kwargs = {k: rec[k] for k in ("key", "partition", "headers", "timestamp") if rec.get(k) is not None}
        while True:
            try:
                producer.produce(topic, value=rec.get("value"), **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
        if count % 10000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{left} records were not delivered to {topic}")
    return count


def end_offsets(bootstrap: str, topic: str, isolation: str = "read_committed",
                client: dict | None = None) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, **(client or {}), "group.id": unique_name("offsets"),
                         "isolation.level": isolation, "enable.auto.commit": False})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in md.partitions}
    finally:
        consumer.close()


def consume_all(bootstrap: str, topic: str, isolation: str = "read_committed",
                timeout: float = 30.0, client: dict | None = None) -> list[Record]:
    ends = end_offsets(bootstrap, topic, isolation, client)
    consumer = Consumer({"bootstrap.servers": bootstrap, **(client or {}), "group.id": unique_name("audit"),
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    out: list[Record] = []
    try:
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    continue
                # A message without an error has its topic, partition and offset.
                out.append(Record(str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0), msg.key(),
                                  msg.value(), list(msg.headers() or []) or None, msg.timestamp()[1]))
            for p in list(pending):
                pos = consumer.position([TopicPartition(topic, p)])[0].offset
                if pos >= ends[p]:
                    pending.discard(p)
        if pending:
            raise TimeoutError(f"did not reach the end of {topic} partitions {sorted(pending)} in {timeout}s")
    finally:
        consumer.close()
    return [r for r in out if r.offset < ends[r.partition]]


def run_to_end(writer: Any, bootstrap: str, topic: str, timeout: float = 120) -> Any:
    """Start ``writer`` (a DataStreamWriter reading ``topic``) and run it until it has read
    what the topic held at start; returns the stopped query.

    Trigger.AvailableNow where Spark drains a Python source in several batches (pyspark
    4.2+); on older lines (one batch only) a processing-time trigger that is stopped once
    the query's progress reaches the input's end as it was at start."""
    from kafka_eos_tools.demo.job import Drain, available_now_supported

    if available_now_supported():
        query = writer.trigger(availableNow=True).start()
        finished = query.awaitTermination(timeout)
    else:
        drain = Drain(bootstrap, topic)
        query = writer.trigger(processingTime="200 milliseconds").start()
        deadline = time.monotonic() + timeout
        while query.isActive and not drain.reached(query) and time.monotonic() < deadline:
            time.sleep(0.2)
        finished = drain.reached(query)
        query.stop()
    assert query.exception() is None, query.exception()
    assert finished, f"the query did not reach the end of {topic} within {timeout} s"
    return query
