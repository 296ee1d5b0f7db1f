"""The Kafka sink's runtime: the process's time, uuids and thread pool
(:class:`~kafka_eos_ds.twophase.runtime.Runtime`) and the clients the sink builds.

:data:`DEFAULT` is the product's: confluent-kafka and kafka-python clients, the driver
process's kept clients (:data:`~kafka_eos_ds.kafka.driver_session.SESSIONS`) and options
checked once per process. A test builds its own :class:`KafkaRuntime` and hands it to
the sink (``KafkaSink(..., runtime=...)``, ``KafkaEosDataSource(options, runtime=...)``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from kafka_eos_ds.kafka.coordinator import TransactionCoordinator
from kafka_eos_ds.kafka.driver_session import SESSIONS, ClientSessions
from kafka_eos_ds.kafka.metadata import MetadataClient
from kafka_eos_ds.kafka_sink.commit_log import LogClients
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog
from kafka_eos_ds.kafka_sink.task_writer import _PartitionWriter
from kafka_eos_ds.twophase.runtime import Runtime, register


class CheckedOptions:
    """Checked options kept by a process: Spark builds the writer again in every driver
    step (and checking builds a librdkafka client); the same options and schema check the
    same. At most ``capacity``, least recently used dropped first."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._kept: OrderedDict[str, SinkConfig] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, check: Callable[[], SinkConfig]) -> SinkConfig:
        """What ``check()`` answered for ``key``, kept; a refusal (it raises) is never kept."""
        with self._lock:
            checked = self._kept.get(key)
            if checked is not None:
                self._kept.move_to_end(key)
        if checked is None:
            checked = check()
            with self._lock:
                self._kept[key] = checked
                while len(self._kept) > self.capacity:
                    self._kept.popitem(last=False)
        return checked


@dataclass(frozen=True)
class KafkaRuntime(Runtime):
    """A :class:`~kafka_eos_ds.twophase.runtime.Runtime` with the Kafka sink's clients.

    Parameters
    ----------
    coordinator : callable
        ``coordinator(conf, clock=..., sleep=...)``: the transaction-coordinator client
        (:class:`~kafka_eos_ds.kafka.coordinator.TransactionCoordinator`); the driver
        process keeps it in ``sessions`` under this factory.
    log_clients : callable
        The commit log's clients (:class:`~.commit_log.LogClients`).
    decision_log : callable
        ``decision_log(conf, topic, prefix, writer, clients, sessions=..., clock=..., wall=...,
        sleep=...)``: one driver step's commit log (:class:`~.decision_log.KafkaDecisionLog`).
    metadata_client : callable
        ``metadata_client(conf)``: reads the cluster's topics (:class:`~.metadata.MetadataClient`),
        kept in ``sessions``.
    partition_writer : callable
        ``partition_writer(config, partition, attempt, family)``: a task's transactional
        producer (:class:`~.task_writer._PartitionWriter`).
    sessions : ClientSessions
        The clients the driver process keeps between its steps.
    checked : CheckedOptions
        The options the process checked already.
    """

    coordinator: Callable[..., Any] = TransactionCoordinator
    log_clients: Callable[[], Any] = LogClients
    decision_log: Callable[..., Any] = KafkaDecisionLog
    metadata_client: Callable[[Mapping[str, Any]], Any] = MetadataClient
    partition_writer: Callable[..., Any] = _PartitionWriter
    sessions: ClientSessions = SESSIONS
    checked: CheckedOptions = field(default_factory=CheckedOptions)


DEFAULT = register(KafkaRuntime("kafka_eos"))
