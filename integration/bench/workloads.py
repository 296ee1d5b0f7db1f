"""The measured workloads. Each function runs one variant once and returns seconds.

All Spark variants run in one SparkSession (one JVM with the built-in connector's jars
and kafka_eos registered), alternated A/B/A/B by the runner so machine drift affects
every variant alike. Raw-client ceilings run in a plain child process (no Spark).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid

BUILTIN = "kafka"
EOS = "kafka_eos"


def _reader(spark, fmt: str, bootstrap: str, topic: str, max_offsets: int | None = None):
    reader = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return reader.load()


def source_read(spark, fmt: str, bootstrap: str, topic: str, **_) -> float:
    """Read the whole topic with Trigger.AvailableNow into Spark's noop sink."""
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as ckpt:
        started = time.perf_counter()
        query = (_reader(spark, fmt, bootstrap, topic).writeStream.format("noop")
                 .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        query.awaitTermination()
        return time.perf_counter() - started


def sink_write(spark, fmt: str, bootstrap: str, records: int, size: int, out_topic: str,
               guarantee: str = "exactly_once", partitions: int = 4, **_) -> float:
    """Write ``records`` generated rows (key, value of ``size`` bytes) as a batch job."""
    df = (spark.range(0, records, 1, partitions)
          .selectExpr("cast(id % 1000 as string) as key",
                      f"concat(cast(id as string), '|', repeat('x', {max(size - 12, 1)})) as value"))
    writer = df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
    if fmt == EOS:
        writer = writer.option("deliveryGuarantee", guarantee).option("transactionalIdPrefix",
                                                                        f"bench-{uuid.uuid4().hex[:8]}")
    started = time.perf_counter()
    writer.save()
    return time.perf_counter() - started


def pipeline(spark, fmt: str, bootstrap: str, topic: str, out_topic: str, max_offsets: int, **_) -> float:
    """Kafka -> Spark -> Kafka with AvailableNow: exactly-once (kafka_eos) or at-least-once (built-in)."""
    df = _reader(spark, fmt, bootstrap, topic, max_offsets).selectExpr("key", "value")
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as ckpt:
        writer = (df.writeStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                  .option("topic", out_topic).option("checkpointLocation", ckpt).trigger(availableNow=True))
        if fmt == EOS:
            writer = writer.option("transactionalIdPrefix", f"bench-{uuid.uuid4().hex[:8]}")
        started = time.perf_counter()
        writer.start().awaitTermination()
        return time.perf_counter() - started


RAW_SCRIPT = r"""
import json, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
args = json.loads(sys.argv[1])
bs, mode = args["bootstrap"], args["mode"]
def consume(topic, partitions, on_msgs):
    c = Consumer({"bootstrap.servers": bs, "group.id": "bench-raw", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.max.bytes": 52428800})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    pending = {p for p, e in ends.items() if e > 0}
    n = 0
    while pending:
        msgs = c.consume(10000, 1.0)
        good = [m for m in msgs if m.error() is None]
        n += len(good)
        on_msgs(good)
        for m in good:
            if m.offset() + 1 >= ends[m.partition()]:
                pending.discard(m.partition())
    c.close()
    return n
started = time.perf_counter()
if mode == "produce":
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.size": 1000000, "acks": "all",
                  "enable.idempotence": True})
    value = b"x" * args["size"]
    for i in range(args["records"]):
        while True:
            try:
                p.produce(args["out_topic"], key=str(i % 1000).encode(), value=value); break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    n = args["records"]
elif mode == "consume":
    n = consume(args["topic"], args["partitions"], lambda msgs: [(m.key(), m.value()) for m in msgs])
else:  # consume -> produce, plain (no transactions): the pipeline's ceiling
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.size": 1000000, "acks": "all",
                  "enable.idempotence": True})
    def forward(msgs):
        for m in msgs:
            while True:
                try:
                    p.produce(args["out_topic"], key=m.key(), value=m.value()); break
                except BufferError:
                    p.poll(0.01)
    n = consume(args["topic"], args["partitions"], forward)
    p.flush(120)
print(json.dumps({"seconds": time.perf_counter() - started, "records": n}))
"""


def raw(mode: str, **args) -> float:
    """Run a raw confluent-kafka client loop in a plain process; returns its seconds."""
    out = subprocess.run([sys.executable, "-c", RAW_SCRIPT, json.dumps({"mode": mode, **args})],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"raw {mode} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
