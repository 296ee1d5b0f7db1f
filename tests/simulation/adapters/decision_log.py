"""THIN ADAPTER for ``kafka_eos_ds.sink.decision_log.KafkaDecisionLog`` (same constructor and
methods). It reads as the real one does, ``read_committed`` up to the last stable offset,
so another writer's open transaction on the commit log hides everything after it. When the
real decision log gets a client seam, plug the model in there and delete this module."""

from __future__ import annotations

import json
import zlib
from typing import Any, Mapping, Optional

from kafka_eos_ds.errors import KafkaClientError, TransactionFencedError
from kafka_eos_ds.sink import transactional_ids
from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.protocol import Decision
from tests.simulation import world as sim
from tests.simulation.adapters.producers import Producer
from tests.simulation.adapters.requests import PROCESS, request
from tests.simulation.model import errors as e


class ModelDecisionLog:
    """``kafka_eos_ds.sink.decision_log.KafkaDecisionLog`` on the model (same constructor)."""

    WRITER_TIMEOUT_MS = 60_000  # librdkafka's default transaction.timeout.ms: the real writer sets none

    def __init__(self, conf: Mapping[str, Any], topic: str, key: str) -> None:
        self.world = sim.world()
        self.topic = topic
        self.key = key
        self._producer: Optional[Producer] = None
        self._partition: Optional[int] = None

    def ensure_topic(self, metadata: Any = None) -> int:
        cluster = self.world.cluster
        if cluster.partitions(self.topic) == 0:
            request("CreateTopics", self.topic, lambda: cluster.create_topic(self.topic, 1), coordinator=False)
        return cluster.partitions(self.topic)

    def fence_writers(self) -> None:
        if self._producer is not None:
            return
        self.ensure_topic()
        producer = Producer(transactional_ids.decision_writer(self.key), self.WRITER_TIMEOUT_MS, "decision writer")
        producer.init()
        self._producer = producer

    def write(self, decision: Decision) -> None:
        partition = self._locate()
        self.fence_writers()
        producer = self._producer
        assert producer is not None
        value = json.dumps(decision.to_json(), sort_keys=True, separators=(",", ":"))
        try:
            producer.produce(self.topic, partition, self.key, value)
            faults.check("decision-before-commit", batch=decision.batch_id)
        except TransactionFencedError as exc:
            self._producer = None
            raise KafkaClientError(f"Writing the commit decision of '{self.key}' failed: {exc}. Another driver of "
                                   "this sink took over its commit log; this one stops.", retriable=False) from exc
        except KafkaClientError as exc:
            self._abort(producer)
            raise KafkaClientError(f"Writing the commit decision failed: {exc}", retriable=True) from exc
        code = producer.end(commit=True)
        if code == e.NONE:
            return
        self._producer = None
        if code in (e.PRODUCER_FENCED, e.INVALID_PRODUCER_EPOCH, e.INVALID_PRODUCER_ID_MAPPING):
            raise KafkaClientError(f"Writing the commit decision of '{self.key}' failed: {e.name(code)}. Another "
                                   "driver of this sink took over its commit log; this one stops.", retriable=False)
        # Still retriable after commit_transaction's timeout: the outcome is settled by the
        # next writer's init_transactions.
        raise KafkaClientError(f"Writing the commit decision failed: {e.name(code)}", retriable=True)

    def _abort(self, producer: Producer) -> None:
        self._producer = None
        try:
            producer.end(commit=False)
        except Exception:  # then the next writer's init_transactions aborts it
            pass

    def latest(self) -> Optional[Decision]:
        self._partition = None
        found = self._lookup()
        return Decision.from_json(json.loads(found)) if found is not None else None

    def _locate(self) -> int:
        if self._partition is None:
            self._lookup()
        assert self._partition is not None
        return self._partition

    def _lookup(self) -> Optional[str]:
        """The latest committed record of the key below each partition's LSO; the hashed
        partition first, then the others (as the real reader's backward windows)."""
        partitions = self.ensure_topic()
        hashed = zlib.crc32(self.key.encode("utf-8")) % max(1, partitions)
        cluster = self.world.cluster

        def read() -> Optional[tuple[int, str]]:
            for partition in [hashed] + [p for p in range(partitions) if p != hashed]:
                mine = [r for r in cluster.log(self.topic, partition).read_committed() if r.key == self.key]
                if mine:
                    return partition, mine[-1].value
            return None

        found = request("Fetch", f"{self.topic} read_committed, key {self.key}", read, coordinator=False)
        if found is None:
            self._partition = hashed
            return None
        self._partition = found[0]
        self.world.sched.log(f"  -> {found[1][:200]}")
        return found[1]

    def close(self) -> None:
        self._producer = None




class ModelMetadata:
    """What ``cluster_metadata()`` returns (confluent-kafka's ClusterMetadata), from the model."""

    def __init__(self) -> None:
        w = sim.world()
        request("Metadata", "", lambda: None, coordinator=False, allow=PROCESS)
        self.topics = {t: object() for t in w.cluster.topics()}
        self.brokers = {1: object()}


def cluster_metadata(config: Any) -> ModelMetadata:
    return ModelMetadata()
