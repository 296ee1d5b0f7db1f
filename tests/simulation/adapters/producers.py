"""Transactional producers on the model.

* :class:`Producer`: what a librdkafka transactional producer does on the wire (init,
  AddPartitions, verified appends, EndTxn), answering with Kafka's error codes; used by
  the task stand-in, the decision-log producer and the second sink of a shared log.
* :class:`ConfluentProducer`: confluent-kafka's ``Producer`` API over it (the calls the
  sink's decision log makes, with librdkafka's errors), handed to the real
  ``KafkaDecisionLog`` by :mod:`.log_clients`.
* :class:`ModelPartitionWriter`: THIN ADAPTER for ``kafka_eos_ds.kafka_sink.task_writer.
  _PartitionWriter`` (one task's producer, a ``twophase.protocol.TaskTransaction``): the
  real ``write_partition`` and ``twophase.task.run_task`` run on it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from kafka_eos_ds.errors import KafkaClientError, TransactionFencedError
from kafka_eos_ds.kafka_sink import transactional_ids
from tests.simulation import world as sim
from tests.simulation.adapters.requests import PROCESS, RETRIABLE, request
from tests.simulation.model import errors as e
from tests.simulation.model.logs import OFFSETS_TOPIC

FENCED = (e.PRODUCER_FENCED, e.INVALID_PRODUCER_EPOCH, e.INVALID_PRODUCER_ID_MAPPING)


class Producer:
    """What a librdkafka transactional producer does on the wire, in the model: init
    (retrying while the coordinator is busy or moving, up to its timeout), AddPartitions
    before the first record to a partition, verified appends, EndTxn. librdkafka retries
    lost requests itself (idempotently), so only process faults strike here."""

    def __init__(self, transactional_id: str, timeout_ms: int, label: str) -> None:
        self.world = sim.world()
        self.tid = transactional_id
        self.timeout_ms = timeout_ms
        self.label = label
        self.pid = self.epoch = -1
        self.partitions: list[tuple[str, int]] = []

    def _retry(self, what: str, detail: str, call: Callable[[], int], timeout_s: float = 60.0) -> int:
        deadline = self.world.clock.monotonic() + timeout_s
        delay = 0.1
        while True:
            code = request(what, detail, call, allow=PROCESS, unavailable=lambda c: c)
            if code not in RETRIABLE or self.world.clock.monotonic() >= deadline:
                return code
            self.world.sched.sleep(delay)
            delay = min(delay * 2, 1.0)

    def init(self, timeout_s: float = 60.0) -> int:
        """InitProducerId; the error code (NONE: pid and epoch set)."""
        answer: list = []

        def call() -> int:
            answer[:] = self.world.cluster.coordinator.init_producer_id(self.tid, self.timeout_ms)
            return answer[0]

        code = self._retry("InitProducerId", f"{self.tid} ({self.label})", call, timeout_s)
        if code == e.NONE:
            self.pid, self.epoch = answer[1], answer[2]
            self.partitions = []
            self.world.sched.log(f"  -> pid {self.pid} e{self.epoch}")
        return code

    def produce(self, topic: str, partition: int, key: Any, value: Any) -> int:
        """AddPartitionsToTxn (the first time), then the append; the error code."""
        tc = self.world.cluster.coordinator
        if (topic, partition) not in self.partitions:
            code = self._retry("AddPartitionsToTxn", f"{self.tid} {topic}-{partition}",
                               lambda: tc.add_partitions(self.tid, self.pid, self.epoch, [(topic, partition)]))
            if code != e.NONE:
                return code
            self.partitions.append((topic, partition))
        shown = value.decode() if isinstance(value, bytes) else value
        return request("Produce", f"{self.tid} -> {topic}-{partition} {shown!r}"[:300],
                       lambda: self.world.cluster.produce(self.tid, self.pid, self.epoch, topic, partition, key,
                                                          value), coordinator=False, allow=PROCESS)

    def send_offsets(self, group: str, offsets: dict[tuple[str, int], int], timeout_s: float = 60.0) -> int:
        """AddOffsetsToTxn, then TxnOffsetCommit (librdkafka's send_offsets_to_transaction)."""
        cluster = self.world.cluster
        code = self._retry("AddOffsetsToTxn", f"{self.tid} group {group}",
                           lambda: cluster.coordinator.add_partitions(self.tid, self.pid, self.epoch,
                                                                      [(OFFSETS_TOPIC, group)]), timeout_s)
        if code != e.NONE:
            return code
        return self._retry("TxnOffsetCommit", f"{self.tid} group {group} {offsets}",
                           lambda: cluster.txn_offset_commit(self.tid, self.pid, self.epoch, group, offsets), timeout_s)

    def end(self, commit: bool, timeout_s: float = 60.0) -> int:
        tc = self.world.cluster.coordinator
        self.partitions = []  # the next transaction adds its partitions again
        return self._retry("EndTxn", f"{self.tid} pid {self.pid} e{self.epoch} {'commit' if commit else 'abort'}",
                           lambda: tc.end_txn(self.tid, self.pid, self.epoch, commit), timeout_s)


def _kafka_exception(code: int, what: str) -> Exception:
    """What librdkafka raises for a transactional call that failed with ``code``."""
    from confluent_kafka import KafkaError, KafkaException

    if code in FENCED:  # fatal: the producer was fenced by a newer instance
        return KafkaException(KafkaError(KafkaError._FENCED, f"{what}: {e.name(code)} (simulated)", fatal=True))
    if code in RETRIABLE:  # retried until the call's timeout
        return KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{what}: timed out ({e.name(code)}, simulated)",
                                         retriable=True))
    return KafkaException(KafkaError(KafkaError._STATE, f"{what}: {e.name(code)} (simulated)",
                                     txn_requires_abort=True))


class ConfluentProducer:
    """``confluent_kafka.Producer`` (transactional) on the model: the calls the sink's decision
    log makes. Records go out at ``produce`` (a step); an error there surfaces, as in
    librdkafka, at ``commit_transaction`` (a fenced producer: fatal; anything else:
    abortable)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.world = sim.world()
        self._wire = Producer(str(conf["transactional.id"]), int(conf.get("transaction.timeout.ms", 60_000)),
                              str(conf.get("client.id", "producer")))
        self._failed: int | None = None
        self._fatal: int | None = None

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        from tests.simulation.adapters.log_clients import metadata

        return metadata()

    def poll(self, timeout: float = -1) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        return 0

    def init_transactions(self, timeout: float = -1) -> None:
        code = self._wire.init(timeout if timeout > 0 else 60.0)
        if code != e.NONE:
            raise _kafka_exception(code, "init_transactions")
        self._fatal = self._failed = None

    def begin_transaction(self) -> None:
        if self._fatal is not None:
            raise _kafka_exception(self._fatal, "begin_transaction")
        self._failed = None

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1, **kw: Any) -> None:
        if self._fatal is not None or self._failed is not None:
            return
        code = self._wire.produce(topic, max(partition, 0), key, value)
        if code in FENCED:
            self._fatal = code
        elif code != e.NONE:
            self._failed = code

    def send_offsets_to_transaction(self, positions: list[Any], group_metadata: Any, timeout: float = -1) -> None:
        """Raises at once, as librdkafka's call does (it waits for both requests)."""
        if self._fatal is not None or self._failed is not None:
            raise _kafka_exception(self._fatal or self._failed or e.NONE, "send_offsets_to_transaction")
        code = self._wire.send_offsets(str(group_metadata), {(tp.topic, tp.partition): tp.offset for tp in positions},
                                       timeout if timeout > 0 else 60.0)
        if code in FENCED:
            self._fatal = code
        if code != e.NONE:
            raise _kafka_exception(code, "send_offsets_to_transaction")

    def commit_transaction(self, timeout: float = -1) -> None:
        if self._fatal is not None:
            raise _kafka_exception(self._fatal, "commit_transaction")
        if self._failed is not None:
            raise _kafka_exception(self._failed, "commit_transaction")
        code = self._wire.end(True, timeout if timeout > 0 else 60.0)
        if code in FENCED:
            self._fatal = code
        if code != e.NONE:
            raise _kafka_exception(code, "commit_transaction")

    def abort_transaction(self, timeout: float = -1) -> None:
        if self._fatal is not None:
            raise _kafka_exception(self._fatal, "abort_transaction")
        code = self._wire.end(False, timeout if timeout > 0 else 60.0)
        if code != e.NONE:
            raise _kafka_exception(code, "abort_transaction")


class ModelPartitionWriter:
    """``kafka_eos_ds.kafka_sink.task_writer._PartitionWriter`` on the model: the task's items are
    ``(topic, partition, key, value)`` records of the simulated query."""

    def __init__(self, config: Any, partition: int, attempt: int, family: str = "") -> None:
        self.config = config
        self.transactional_id = (transactional_ids.build(config.prefix, partition, attempt, family)
                                 if config.exactly_once and config.prefix is not None else None)
        self.records = 0
        self.pid_epoch: tuple[int, int] | None = None
        self._producer: Producer | None = None

    def write_all(self, items: Iterable[Any]) -> int:
        for topic, partition, key, value in items:
            if self._producer is None:
                assert self.transactional_id is not None, "the simulation runs exactly_once sinks"
                self._producer = Producer(self.transactional_id, self.config.transaction_timeout_ms, "task")
                code = self._producer.init()
                if code != e.NONE:
                    raise KafkaClientError(f"init_transactions({self.transactional_id}) failed: {e.name(code)}",
                                           retriable=True)
            code = self._producer.produce(topic or self.config.topic, partition, key, value)
            if code in FENCED:
                raise TransactionFencedError(f"A newer producer took over {self.transactional_id}: {e.name(code)}")
            if code != e.NONE:
                raise KafkaClientError(f"Producing to {topic} failed: {e.name(code)}", retriable=True)
            self.records += 1
        return self.records

    def pre_commit(self) -> None:
        if self._producer is None:
            return
        # flush(): every record is acknowledged (the model appends synchronously); the
        # transaction stays open; the producer id and epoch go to the driver.
        sim.world().sched.point("kafka:flush", self.transactional_id or "", PROCESS)
        self.pid_epoch = (self._producer.pid, self._producer.epoch)
        self._producer = None

    def abort(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.end(commit=False)
        except Exception:  # best effort, as the real one: the driver fences the id anyway
            pass
