"""The exactly-once audit: every input record's output exactly once, in order.

Convention: each input record carries a unique id, and the pipeline carries it into its
output record. By default the id is the value's text before the first ``|`` (so
``b"42|hello"`` has id ``42``; transformations such as ``upper(value)`` keep it); it can
be the key or a header instead (``id_from="key"`` / ``"header:NAME"``).

The audit reads the input and the output topic as a ``read_committed`` consumer and
reports records in, records out, duplicates (extra copies), losses (input ids never in
the output), unexpected records (output ids not in the input, or no id), and order
violations: for each key, the output must list the key's records in input order (records
of one input partition, written to one output partition, keep their order).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator

from confluent_kafka import Consumer, TopicPartition

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.kafka.settings import client_config


@dataclass
class AuditReport:
    records_in: int = 0
    records_out: int = 0
    unique_out: int = 0
    duplicates: int = 0
    losses: int = 0
    unexpected: int = 0
    order_violations: int = 0
    keys_checked: int = 0
    examples: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.losses or self.unexpected or self.order_violations)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ok": self.ok}, indent=2, sort_keys=True)

    def table(self) -> str:
        rows = [("records in", self.records_in), ("records out", self.records_out),
                ("unique ids out", self.unique_out), ("duplicates", self.duplicates),
                ("losses", self.losses), ("unexpected records", self.unexpected),
                ("order violations", self.order_violations), ("keys checked for order", self.keys_checked)]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value:>12,}" for name, value in rows]
        lines.append(f"{'exactly once':<{width}}  {'YES' if self.ok else 'NO':>12}")
        for name, sample in self.examples.items():
            lines.append(f"  e.g. {name}: {sample}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    id: str | None


def id_extractor(id_from: str = "value", separator: str = "|"):
    """A function record -> id (or None) for the given convention."""
    if id_from == "value":
        sep = separator.encode()

        def from_value(msg) -> str | None:
            value = msg.value()
            if value is None:
                return None
            head = value.split(sep, 1)[0]
            return head.decode("utf-8", "replace") if head else None

        return from_value
    if id_from == "key":
        return lambda msg: None if msg.key() is None else msg.key().decode("utf-8", "replace")
    if id_from.startswith("header:"):
        name = id_from.split(":", 1)[1]

        def from_header(msg) -> str | None:
            for key, value in msg.headers() or []:
                if key == name and value is not None:
                    return value.decode("utf-8", "replace")
            return None

        return from_header
    raise ConfigError(f"id_from must be 'value', 'key' or 'header:NAME', got {id_from!r}.")


def _settled_ends(conf: dict, topic: str, partitions: list, settle: float) -> dict[int, int]:
    """read_committed end offsets, once they have caught up with the high watermarks.

    A committed transaction becomes visible when its commit markers reach the partitions,
    a moment after the coordinator answered the commit. Waiting (at most ``settle``
    seconds) until no partition holds back its last stable offset keeps an audit run right
    after a pipeline finished from counting those records as lost. A transaction still
    open after that (a leftover) is audited as it is: invisible."""
    committed = Consumer(client_config(conf, "audit", **{"group.id": f"kafka-eos-audit-{time.time_ns()}",
                                                         "isolation.level": "read_committed"}))
    uncommitted = Consumer(client_config(conf, "audit", **{"group.id": f"kafka-eos-audit-{time.time_ns()}",
                                                           "isolation.level": "read_uncommitted"}))
    try:
        deadline = time.monotonic() + settle
        while True:
            ends = {p: committed.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                    for p in partitions}
            highs = {p: uncommitted.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                     for p in partitions}
            if ends == highs or time.monotonic() > deadline:
                return ends
            time.sleep(0.2)
    finally:
        committed.close()
        uncommitted.close()


def read_topic(conf: dict, topic: str, extract, timeout: float = 120.0, settle: float = 15.0) -> Iterator[Record]:
    """Every record visible to read_committed, partition by partition (see _settled_ends)."""
    consumer = Consumer(client_config(conf, "audit", **{"group.id": f"kafka-eos-audit-{time.time_ns()}",
                                                        "isolation.level": "read_committed",
                                                        "enable.auto.commit": False,
                                                        "auto.offset.reset": "earliest"}))
    try:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None:
            raise ConfigError(f"Topic {topic!r} does not exist or cannot be described: {meta and meta.error}")
        ends = _settled_ends(conf, topic, list(meta.partitions), settle)
        live = [TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0]
        consumer.assign(live)
        pending = {tp.partition for tp in live}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"audit: could not read {topic} partitions {sorted(pending)} to the end")
            for msg in consumer.consume(5000, 0.5):
                part, offset = msg.partition(), msg.offset()
                if msg.error() is None and part is not None and offset is not None and offset < ends[part]:
                    yield Record(part, offset, msg.key(), extract(msg))
            # Under read_committed the last offsets can be markers; position tells.
            for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                if tp.offset >= ends[tp.partition]:
                    pending.discard(tp.partition)
    finally:
        consumer.close()


def audit_records(inputs: Iterable[Record], outputs: Iterable[Record]) -> AuditReport:
    report = AuditReport()
    input_pos: dict[str, tuple[int, int]] = {}
    for rec in inputs:
        report.records_in += 1
        if rec.id is not None:
            input_pos[rec.id] = (rec.partition, rec.offset)
    seen: Counter = Counter()
    per_key: dict[bytes, list[tuple[int, int, tuple[int, int]]]] = defaultdict(list)
    for rec in outputs:
        report.records_out += 1
        if rec.id is None or rec.id not in input_pos:
            report.unexpected += 1
            report.examples.setdefault("unexpected", f"partition {rec.partition} offset {rec.offset} id {rec.id!r}")
            continue
        seen[rec.id] += 1
        if rec.key is not None:
            per_key[rec.key].append((rec.partition, rec.offset, input_pos[rec.id]))
    report.unique_out = len(seen)
    report.duplicates = sum(n - 1 for n in seen.values() if n > 1)
    dup = next((i for i, n in seen.items() if n > 1), None)
    if dup is not None:
        report.examples["duplicate"] = f"id {dup} x{seen[dup]}"
    lost = [i for i in input_pos if i not in seen]
    report.losses = len(lost)
    if lost:
        report.examples["loss"] = f"id {lost[0]} (input {input_pos[lost[0]]})"
        report.examples["losses by input"] = _ranges(sorted(input_pos[i] for i in lost))
    for key, rows in per_key.items():
        report.keys_checked += 1
        # Only records that share an input partition and an output partition have an order.
        last: dict[tuple[int, int], int] = {}
        for out_partition, _, (in_partition, in_offset) in sorted(rows, key=lambda r: (r[0], r[1])):
            lane = (in_partition, out_partition)
            if lane in last and in_offset < last[lane]:
                report.order_violations += 1
                report.examples.setdefault("order", f"key {key!r}: input offset {in_offset} after {last[lane]}")
            last[lane] = max(in_offset, last.get(lane, -1))
    return report


def _ranges(positions: list[tuple[int, int]], shown: int = 12) -> str:
    """``[(partition, offset), ...]`` (sorted) as runs, ``p1@248-365``: which batches and
    tasks a loss falls in, told at a glance from the checkpoint's offsets."""
    runs: list[list[int]] = []
    for part, offset in positions:
        if runs and runs[-1][0] == part and runs[-1][2] == offset - 1:
            runs[-1][2] = offset
        else:
            runs.append([part, offset, offset])
    text = ", ".join(f"p{p}@{a}" if a == b else f"p{p}@{a}-{b}" for p, a, b in runs[:shown])
    return text + (f", ... ({len(runs) - shown} more runs)" if len(runs) > shown else "")


def audit(conf: dict, input_topic: str, output_topic: str, id_from: str = "value",
          separator: str = "|", timeout: float = 120.0) -> AuditReport:
    """Audit ``output_topic`` against ``input_topic`` (both read as read_committed)."""
    extract = id_extractor(id_from, separator)
    inputs = list(read_topic(conf, input_topic, extract, timeout))
    ids = Counter(r.id for r in inputs)
    if None in ids or any(n > 1 for n in ids.values()):
        raise ConfigError(f"Input topic {input_topic!r} must carry a unique id per record "
                          f"(id_from={id_from!r}); found missing or repeated ids.")
    return audit_records(inputs, read_topic(conf, output_topic, extract, timeout))
