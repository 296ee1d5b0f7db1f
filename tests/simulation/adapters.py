"""THIN ADAPTERS: the Kafka models behind the product's client seams, as those are today.

Each class stands in for one class of the product that talks to Kafka, with the same
constructor and methods, and answers from the models in :mod:`.model`:

* :class:`ModelTransactionCoordinator` for ``kafka_eos_ds.kafka.coordinator.
  TransactionCoordinator`` (kafka-python requests for another process's transactions): the
  real ``KafkaTransactions`` and ``commit_outcome`` run on it;
* :class:`ModelPartitionWriter` for ``kafka_eos_ds.sink.task_writer._PartitionWriter``
  (one task's librdkafka producer, a ``twophase.protocol.TaskTransaction``): the real
  ``write_partition`` and ``twophase.task.run_task`` run on it;
* :class:`ModelDecisionLog` for ``kafka_eos_ds.sink.decision_log.KafkaDecisionLog``: it
  reads as the real one does, ``read_committed`` up to the last stable offset, so another
  writer's open transaction on the commit log hides everything after it. When the real
  decision log gets a client seam, plug the model in there and delete this class.

Every request first makes a step of the scheduler (where faults strike: the process
dies before the request, the request is lost, its answer is lost after it took effect,
the coordinator is moving). :mod:`.seams` installs these classes.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from kafka_eos_ds.errors import ConfigError, KafkaClientError, TransactionError, TransactionFencedError
from kafka_eos_ds.kafka.coordinator import OPEN_STATES, TxnState
from kafka_eos_ds.sink import transactional_ids
from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.protocol import Decision
from tests.simulation import world as sim
from tests.simulation.model import errors as e
from tests.simulation.model.logs import OFFSETS_TOPIC
from tests.simulation.scheduler import CRASH, DROP, LOSE, OUTAGE, SLOW, STALL

# What can strike at a request: the process dies or stalls, the step is slow, the coordinator
# moves; for requests whose loss the product sees (admin calls), a lost request or answer.
PROCESS = (CRASH, STALL, SLOW, OUTAGE)
NETWORK = PROCESS + (LOSE, DROP)

RETRIABLE = (e.REQUEST_TIMED_OUT, e.CONCURRENT_TRANSACTIONS) + e.UNAVAILABLE


def _request(label: str, detail: str, apply: Callable[[], Any], *, coordinator: bool = True,
             allow: Sequence[str] = NETWORK, unavailable: Any = None) -> Any:
    """One request: a step, then the model's answer (or what a moving coordinator says)."""
    w = sim.world()
    fault = w.sched.point("kafka:" + label, detail, allow)
    if fault is not None and fault.kind == DROP:
        raise KafkaClientError(f"{label} failed: request timed out (simulated)", retriable=True)
    if coordinator and w.cluster.coordinator_error() != e.NONE:
        code = w.cluster.coordinator_error()
        if unavailable is None:
            raise KafkaClientError(f"{label} failed: {e.name(code)}", retriable=True)
        return unavailable(code)
    answer = apply()
    if fault is not None and fault.kind == LOSE:
        raise KafkaClientError(f"{label}: the answer was lost (simulated); it took effect", retriable=True)
    return answer


def _txn_state(view: Any) -> TxnState:
    return TxnState(view.transactional_id, view.state.value, view.producer_id, view.epoch, view.start_ms,
                    view.timeout_ms)


class ModelTransactionCoordinator:
    """``kafka_eos_ds.kafka.coordinator.TransactionCoordinator`` on the model cluster."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.world = sim.world()
        self.tc = self.world.cluster.coordinator

    def close(self) -> None:
        pass

    def __enter__(self) -> "ModelTransactionCoordinator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        what = "commit" if commit else "abort"
        return _request("EndTxn", f"{transactional_id} pid {producer_id} e{epoch} {what}",
                        lambda: self._log(self.tc.end_txn(transactional_id, producer_id, epoch, commit)),
                        unavailable=lambda code: code)

    def _log(self, code: int) -> int:
        if code != e.NONE:
            self.world.sched.log(f"  -> {e.name(code)}")
        return code

    def fence(self, transactional_id: str, transaction_timeout_ms: int, *, timeout_s: float = 60.0) -> None:
        """InitProducerId until it succeeds, as the real fence (CONCURRENT_TRANSACTIONS while the
        abort it caused completes), with backoff on the virtual clock."""
        deadline = self.world.clock.monotonic() + timeout_s
        delay = 0.02
        while True:
            try:
                code = _request("InitProducerId", f"{transactional_id} (fence)",
                                lambda: self._log(self.tc.init_producer_id(transactional_id,
                                                                           transaction_timeout_ms)[0]),
                                unavailable=lambda c: c)
            except KafkaClientError:
                code = -1
            if code == e.NONE:
                return
            if code == e.INVALID_TRANSACTION_TIMEOUT:
                raise ConfigError(f"The broker refused transaction timeout {transaction_timeout_ms} ms.")
            if code not in RETRIABLE and code != -1:
                raise TransactionError(f"Could not abort the open transaction of {transactional_id}: {e.name(code)}")
            if self.world.clock.monotonic() >= deadline:
                raise TransactionError(f"Could not abort the open transaction of {transactional_id} within "
                                       f"{timeout_s:.0f}s (last: {e.name(code)})", retriable=True)
            self.world.sched.sleep(delay)
            delay = min(delay * 2, 1.0)

    def describe(self, transactional_id: str) -> Optional[TxnState]:
        view = _request("DescribeTransactions", transactional_id, lambda: self.tc.describe(transactional_id))
        return None if view is None else _txn_state(view)

    def describe_many(self, transactional_ids: Sequence[str]) -> dict[str, Optional[TxnState]]:
        ids = list(dict.fromkeys(transactional_ids))
        if not ids:
            return {}
        views = _request("DescribeTransactions", ", ".join(ids), lambda: {t: self.tc.describe(t) for t in ids})
        return {t: (None if v is None else _txn_state(v)) for t, v in views.items()}

    def list_transactions(self, id_regex: Optional[str] = None, open_only: bool = True) -> list[tuple[str, int, str]]:
        from tests.simulation.model.coordinator import TxnState as S

        states = [S(s.value) for s in OPEN_STATES if s.value in S._value2member_map_] if open_only else None

        def listed() -> list[tuple[str, int, str]]:
            self.world.on_listing(id_regex)
            return [(tid, pid, state.value) for tid, pid, state in self.tc.list_transactions(states, id_regex)]

        return _request("ListTransactions", id_regex or "", listed)

    def send_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                     offsets: Mapping[str, Mapping[str, int]]) -> None:
        code = _request("AddOffsetsToTxn", f"{transactional_id} group {group_id}",
                        lambda: self.tc.add_partitions(transactional_id, producer_id, epoch,
                                                       [(OFFSETS_TOPIC, group_id)]), unavailable=lambda c: c)
        _raise_for(code, f"AddOffsetsToTxn({transactional_id}, group {group_id!r})")
        flat = {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}
        code = _request("TxnOffsetCommit", f"{transactional_id} group {group_id} {flat}",
                        lambda: self.world.cluster.txn_offset_commit(transactional_id, producer_id, epoch, group_id,
                                                                     flat), unavailable=lambda c: c)
        _raise_for(code, f"TxnOffsetCommit({transactional_id}, group {group_id!r})")

    def commit_offsets(self, group_id: str, offsets: Mapping[str, Mapping[str, int]]) -> None:
        flat = {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}
        _request("OffsetCommit", f"group {group_id} {flat}", lambda: self.world.cluster.groups.commit(group_id, flat))

    def group_offsets(self, group_id: str) -> dict[str, dict[str, int]]:
        found = _request("OffsetFetch", f"group {group_id}", lambda: self.world.cluster.groups.offsets(group_id))
        out: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(found.items()):
            out.setdefault(topic, {})[str(partition)] = offset
        return out


def _raise_for(code: int, what: str) -> None:
    if code != e.NONE:
        raise KafkaClientError(f"{what} failed: {e.name(code)}", retriable=code in RETRIABLE)


class _Producer:
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
            code = _request(what, detail, call, allow=PROCESS, unavailable=lambda c: c)
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
        code = _request("Produce", f"{self.tid} -> {topic}-{partition} {value!r}",
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
        self._producer: Optional[_Producer] = None

    def write_all(self, items: Iterable[Any]) -> int:
        for topic, partition, key, value in items:
            if self._producer is None:
                assert self.transactional_id is not None, "the simulation runs exactly_once sinks"
                self._producer = _Producer(self.transactional_id, self.config.transaction_timeout_ms, "task")
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


class ModelDecisionLog:
    """``kafka_eos_ds.sink.decision_log.KafkaDecisionLog`` on the model (same constructor)."""

    WRITER_TIMEOUT_MS = 60_000  # librdkafka's default transaction.timeout.ms: the real writer sets none

    def __init__(self, conf: Mapping[str, Any], topic: str, key: str) -> None:
        self.world = sim.world()
        self.topic = topic
        self.key = key
        self._producer: Optional[_Producer] = None
        self._partition: Optional[int] = None

    def ensure_topic(self, metadata: Any = None) -> int:
        cluster = self.world.cluster
        if cluster.partitions(self.topic) == 0:
            _request("CreateTopics", self.topic, lambda: cluster.create_topic(self.topic, 1), coordinator=False)
        return cluster.partitions(self.topic)

    def fence_writers(self) -> None:
        if self._producer is not None:
            return
        self.ensure_topic()
        producer = _Producer(transactional_ids.decision_writer(self.key), self.WRITER_TIMEOUT_MS, "decision writer")
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

    def _abort(self, producer: _Producer) -> None:
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

        found = _request("Fetch", f"{self.topic} read_committed, key {self.key}", read, coordinator=False)
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
        _request("Metadata", "", lambda: None, coordinator=False, allow=PROCESS)
        self.topics = {t: object() for t in w.cluster.topics()}
        self.brokers = {1: object()}


def cluster_metadata(config: Any) -> ModelMetadata:
    return ModelMetadata()
