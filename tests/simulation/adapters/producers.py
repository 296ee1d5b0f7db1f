"""THIN ADAPTER for ``kafka_eos_ds.sink.task_writer._PartitionWriter`` (one task's librdkafka
producer, a ``twophase.protocol.TaskTransaction``): the real ``write_partition`` and
``twophase.task.run_task`` run on it. :class:`Producer` is what a librdkafka transactional
producer does on the wire, also used by the decision-log adapter and the second sink."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from kafka_eos_ds.errors import KafkaClientError, TransactionFencedError
from kafka_eos_ds.sink import transactional_ids
from tests.simulation import world as sim
from tests.simulation.adapters.requests import PROCESS, RETRIABLE, request
from tests.simulation.model import errors as e


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

    def init(self) -> None:
        answer: list = []

        def call() -> int:
            answer[:] = self.world.cluster.coordinator.init_producer_id(self.tid, self.timeout_ms)
            return answer[0]

        code = self._retry("InitProducerId", f"{self.tid} ({self.label})", call)
        if code != e.NONE:
            raise KafkaClientError(f"init_transactions({self.tid}) failed: {e.name(code)}", retriable=True)
        self.pid, self.epoch = answer[1], answer[2]
        self.partitions = []
        self.world.sched.log(f"  -> pid {self.pid} e{self.epoch}")

    def produce(self, topic: str, partition: int, key: Any, value: Any) -> None:
        tc = self.world.cluster.coordinator
        if (topic, partition) not in self.partitions:
            code = self._retry("AddPartitionsToTxn", f"{self.tid} {topic}-{partition}",
                               lambda: tc.add_partitions(self.tid, self.pid, self.epoch, [(topic, partition)]))
            self._check(code, "AddPartitionsToTxn")
            self.partitions.append((topic, partition))
        code = request("Produce", f"{self.tid} -> {topic}-{partition} {value!r}",
                        lambda: self.world.cluster.produce(self.tid, self.pid, self.epoch, topic, partition, key,
                                                           value), coordinator=False, allow=PROCESS)
        self._check(code, "Produce")

    def end(self, commit: bool) -> int:
        tc = self.world.cluster.coordinator
        self.partitions = []  # the next transaction adds its partitions again
        return self._retry("EndTxn", f"{self.tid} pid {self.pid} e{self.epoch} {'commit' if commit else 'abort'}",
                           lambda: tc.end_txn(self.tid, self.pid, self.epoch, commit))

    def _check(self, code: int, what: str) -> None:
        if code in (e.PRODUCER_FENCED, e.INVALID_PRODUCER_EPOCH, e.INVALID_PRODUCER_ID_MAPPING):
            raise TransactionFencedError(f"A newer producer took over {self.tid}: {what} {e.name(code)}")
        if code != e.NONE:
            raise KafkaClientError(f"{what} for {self.tid} failed: {e.name(code)}", retriable=True)


class ModelPartitionWriter:
    """``kafka_eos_ds.sink.task_writer._PartitionWriter`` on the model: the task's items are
    ``(topic, partition, key, value)`` records of the simulated query."""

    def __init__(self, config: Any, partition: int, attempt: int) -> None:
        self.config = config
        self.transactional_id = (transactional_ids.build(config.prefix, partition, attempt)
                                 if config.exactly_once and config.prefix is not None else None)
        self.records = 0
        self.pid_epoch: Optional[tuple[int, int]] = None
        self._producer: Optional[Producer] = None

    def write_all(self, items: Iterable[Any]) -> int:
        for topic, partition, key, value in items:
            if self._producer is None:
                assert self.transactional_id is not None, "the simulation runs exactly_once sinks"
                self._producer = Producer(self.transactional_id, self.config.transaction_timeout_ms, "task")
                self._producer.init()
            self._producer.produce(topic or self.config.topic, partition, key, value)
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
