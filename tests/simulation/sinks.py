"""The sinks under test, as a simulated query sees them: how to build the data source,
what a task's items look like, and what a reader of the output sees.

* :class:`KafkaSink`: ``format("kafka_eos")`` on the model cluster (output topic and
  commit log in the models; the product's clients replaced by :mod:`.adapters`).
* :class:`FileSink`: ``format("kafka_eos_file")`` on a real temporary directory (jsonl).
* :func:`other_sink`: a second sink sharing the commit-log topic whose driver dies
  in the middle of its decision writes, leaving them open (until its next write fences
  them, or its 60 s transaction timeout).

An output value is ``label:input partition:offset`` (:func:`~.invariants.parse_value`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.simulation.adapters import Producer
from tests.simulation.invariants import Oracle
from tests.simulation.scheduler import Actor
from tests.simulation.world import World, world


@dataclass
class KafkaSink:
    prefix: str = "sim"
    topic: str = "out"
    out_partitions: int = 2
    commit_log: str = "_kafka_eos_commit_log"
    timeout_ms: int = 60_000
    commit_timeout_ms: int = 20_000
    extra: dict = field(default_factory=dict)
    kind = "kafka"

    def setup(self, w: World, oracle: Oracle) -> None:
        w.cluster.create_topic(self.topic, self.out_partitions)
        oracle.watch_kafka_sink(self.prefix, self.commit_log, [self.topic])

    def options(self, checkpoint: str = "", extra: dict | None = None) -> dict:
        """The sink's options: a stream's with its ``checkpoint``, else a df.write's (no
        checkpoint, no sourceGroupId); ``extra``: the write's own (txnAppId, txnVersion)."""
        opts = {"kafka.bootstrap.servers": "model:9092", "topic": self.topic, "transactionalIdPrefix": self.prefix,
                "kafka.transaction.timeout.ms": str(self.timeout_ms), "commitTimeoutMs": str(self.commit_timeout_ms)}
        if checkpoint:
            opts["checkpointLocation"] = checkpoint
        more = {k: v for k, v in self.extra.items() if checkpoint or k != "sourceGroupId"}
        return {**opts, **more, **(extra or {})}

    def data_source(self, checkpoint: str = "", extra: dict | None = None) -> Any:
        from kafka_eos_ds.datasource import KafkaEosDataSource

        return KafkaEosDataSource(self.options(checkpoint, extra), runtime=world().runtimes["kafka"])

    def item(self, label: str, partition: int, offset: int) -> Any:
        return (self.topic, partition % self.out_partitions, str(partition), f"{label}:{partition}:{offset}")

    def visible(self, w: World, oracle: Oracle) -> dict:
        return {f"{t}-{p}": values for (t, p), values in oracle.kafka_visible().items() if t == self.topic}


@dataclass
class FileSink:
    path: Path
    commit_timeout_ms: int = 20_000
    kind = "file"

    def setup(self, w: World, oracle: Oracle) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    extra: dict = field(default_factory=dict)

    def data_source(self, checkpoint: str = "", extra: dict | None = None) -> Any:
        from kafka_eos_ds.table_sink.datasource import KafkaEosFileDataSource

        opts = {"path": str(self.path), "fileFormat": "jsonl", "commitTimeoutMs": str(self.commit_timeout_ms)}
        if checkpoint:
            opts["checkpointLocation"] = checkpoint
        return KafkaEosFileDataSource({**opts, **(extra or {})}, runtime=world().runtimes["file"])

    def item(self, label: str, partition: int, offset: int) -> Any:
        return {"key": str(partition), "value": f"{label}:{partition}:{offset}"}

    def visible(self, w: World, oracle: Oracle) -> dict:
        """What a reader of the directory sees: the final files, each in its own order."""
        out = {}
        for path in sorted(self.path.glob("part-*.jsonl")):
            out[path.name] = [json.loads(line)["value"] for line in path.read_text().splitlines() if line.strip()]
        return out


def other_sink(w: World, topic: str, writes: int) -> None:
    """A second sink's drivers on the same commit-log topic: each writes one decision; about
    half die between the record and the commit, leaving their transaction open (until their
    writer's timeout: this version's 10 s, or an older version's librdkafka default, 60 s)."""
    sched = w.sched
    timeout_ms = sched.rng().choice([10_000, 60_000])
    for i in range(writes):
        sched.sleep(sched.rng().uniform(0.5, 40.0))
        leave_open = sched.rng().random() < 0.5

        def write(i: int = i, leave_open: bool = leave_open) -> None:
            producer = Producer("other.decisions", timeout_ms, "the other sink's decision writer")
            if producer.init() != 0:
                return
            value = json.dumps({"queryId": "other-query", "batchId": i, "state": "done", "transactions": []})
            producer.produce(topic, 0, b"other|q:other-query", value.encode())
            if leave_open:
                sched.log("the other sink's driver dies with its decision write open")
                return
            producer.end(commit=True)

        actor: Actor = sched.spawn(f"other.w{i}", write, "other")
        sched.wait_until(lambda actor=actor: actor.done)
