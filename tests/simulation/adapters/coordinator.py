"""THIN ADAPTER under ``kafka_eos_ds.kafka.coordinator.TransactionCoordinator``: the real class
runs, built with :class:`ModelAdmin` as its ``admin_factory`` (kafka-python's
``KafkaAdminClient``: DescribeTransactions, ListTransactions, OffsetCommit)
and :class:`ModelChannel` as its ``channel_factory`` (requests to a coordinator: EndTxn,
InitProducerId, AddOffsetsToTxn, TxnOffsetCommit, OffsetFetch, read from kafka-python's own request
objects). So the real fence loop, error mapping, id filtering and ``KafkaTransactions`` /
``commit_outcome`` run on the model's answers.

What a moving coordinator does to each call, as kafka-python shows it: a request's answer
carries NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS (the real class forgets the cached
coordinator and the caller retries); the admin calls raise the matching retriable error.
A lost request or answer raises ``KafkaTimeoutError`` (after the request took effect, for
a lost answer).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

import kafka.errors as kerrors

from tests.simulation import world as sim
from tests.simulation.adapters.requests import request
from tests.simulation.model import errors as e
from tests.simulation.model.logs import OFFSETS_TOPIC


def _moving(code: int) -> Any:
    """What kafka-python raises from an admin call while the coordinator moves (retriable)."""
    raise kerrors.for_code(code)(f"coordinator moving (simulated): {e.name(code)}")


def _answer(code: int, **fields: Any) -> SimpleNamespace:
    return SimpleNamespace(error_code=code, **fields)


class ModelChannel:
    """``kafka_eos_ds.kafka.kafka_python.CoordinatorChannel`` on the model: one request, one answer."""

    def __init__(self, admin: Any) -> None:
        self.world = sim.world()
        self.tc = self.world.cluster.coordinator

    def forget(self, key: str, *, group: bool) -> None:
        pass

    def refresh(self) -> None:
        pass  # the model's coordinator answers for every id: no broker list to go stale

    def api_version(self, request_class: Any) -> int:
        return 2  # ListTransactions v2 (KIP-1152): the brokers filter by id pattern

    def send(self, key: str, req: Any, *, group: bool) -> Any:
        name = type(req).__name__.removesuffix("Request")
        handler: Callable[[Any], Any] = getattr(self, "_" + name)
        return handler(req)

    def _log(self, code: int) -> int:
        if code != e.NONE:
            self.world.sched.log(f"  -> {e.name(code)}")
        return code

    def _EndTxn(self, req: Any) -> Any:
        tid, pid, epoch, commit = req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed)
        code = request("EndTxn", f"{tid} pid {pid} e{epoch} {'commit' if commit else 'abort'}",
                       lambda: self._log(self.tc.end_txn(tid, pid, epoch, commit)), unavailable=lambda c: c,
                       lost=kerrors.KafkaTimeoutError)
        return _answer(code)

    def _InitProducerId(self, req: Any) -> Any:
        tid = req.transactional_id
        code = request("InitProducerId", f"{tid} (fence)",
                       lambda: self._log(self.tc.init_producer_id(tid, req.transaction_timeout_ms)[0]),
                       unavailable=lambda c: c, lost=kerrors.KafkaTimeoutError)
        return _answer(code)

    def _AddOffsetsToTxn(self, req: Any) -> Any:
        tid = req.transactional_id
        code = request("AddOffsetsToTxn", f"{tid} group {req.group_id}",
                       lambda: self._log(self.tc.add_partitions(tid, req.producer_id, req.producer_epoch,
                                                                [(OFFSETS_TOPIC, req.group_id)])),
                       unavailable=lambda c: c, lost=kerrors.KafkaTimeoutError)
        return _answer(code)

    def _TxnOffsetCommit(self, req: Any) -> Any:
        tid, group = req.transactional_id, req.group_id
        flat = {(t.name, int(p.partition_index)): int(p.committed_offset) for t in req.topics for p in t.partitions}
        code = request("TxnOffsetCommit", f"{tid} group {group} {flat}",
                       lambda: self._log(self.world.cluster.txn_offset_commit(tid, req.producer_id,
                                                                              req.producer_epoch, group, flat)),
                       unavailable=lambda c: c, lost=kerrors.KafkaTimeoutError)
        return _answer(e.NONE, topics=[SimpleNamespace(name=t.name, partitions=[
            SimpleNamespace(partition_index=p.partition_index, error_code=code) for p in t.partitions])
            for t in req.topics])

    def _OffsetFetch(self, req: Any) -> Any:
        """With require_stable: a partition with a transaction's offsets not yet marked
        answers UNSTABLE_OFFSET_COMMIT (the group coordinator's own check)."""
        group, asked = req.group_id, [(t.name, int(p)) for t in req.topics for p in t.partition_indexes]
        groups = self.world.cluster.groups

        def fetched() -> Any:
            held = groups.offsets(group)
            unstable = groups.pending_partitions(group) if req.require_stable else set()
            answer = {tp: (e.UNSTABLE_OFFSET_COMMIT, -1) if tp in unstable else (e.NONE, held.get(tp, -1))
                      for tp in asked}
            if unstable & set(asked):
                self.world.sched.log(f"  -> {e.name(e.UNSTABLE_OFFSET_COMMIT)}")
            return _answer(e.NONE, topics=[SimpleNamespace(name=t.name, partitions=[
                SimpleNamespace(partition_index=int(p), committed_offset=answer[(t.name, int(p))][1],
                                error_code=answer[(t.name, int(p))][0]) for p in t.partition_indexes])
                for t in req.topics])

        return request("OffsetFetch", f"group {group} {asked}", fetched,
                       unavailable=lambda c: _answer(c, topics=[]), lost=kerrors.KafkaTimeoutError)


class ModelAdmin:
    """kafka-python's ``KafkaAdminClient`` (the calls the coordinator class makes) on the model."""

    def __init__(self, **settings: Any) -> None:
        self.world = sim.world()
        self.tc = self.world.cluster.coordinator

    def close(self) -> None:
        pass

    def _call(self, label: str, detail: str, apply: Callable[[], Any]) -> Any:
        return request(label, detail, apply, unavailable=_moving, lost=kerrors.KafkaTimeoutError)

    def describe_transactions(self, transactional_ids: Sequence[str]) -> Mapping[str, Any]:
        ids = list(transactional_ids)

        def described() -> dict[str, Any]:
            views = {t: self.tc.describe(t) for t in ids}
            missing = [t for t, v in views.items() if v is None]
            if missing:
                raise kerrors.TransactionalIdNotFoundError(
                    f"DescribeTransactionsRequest failed for transactional id '{missing[0]}'.")
            return {t: SimpleNamespace(state=v.state.value, producer_id=v.producer_id, producer_epoch=v.epoch,
                                       transaction_timeout_ms=v.timeout_ms, transaction_start_time_ms=v.start_ms)
                    for t, v in views.items()}

        return self._call("DescribeTransactions", ", ".join(ids), described)

    def list_transactions(self, state_filters: Any = None,
                          transactional_id_pattern: str | None = None) -> Mapping[Any, Any]:
        from tests.simulation.model.coordinator import TxnState as S

        states = [S(str(s)) for s in state_filters if str(s) in S._value2member_map_] \
            if state_filters is not None else None

        def listed() -> dict[int, list]:
            self.world.on_listing(transactional_id_pattern)
            return {1: [SimpleNamespace(transactional_id=tid, producer_id=pid, state=state.value)
                        for tid, pid, state in self.tc.list_transactions(states, transactional_id_pattern)]}

        return self._call("ListTransactions", transactional_id_pattern or "", listed)

    def alter_group_offsets(self, group_id: str, offsets: Mapping[Any, Any]) -> Mapping[Any, Any]:
        flat = {(tp.topic, int(tp.partition)): int(meta.offset) for tp, meta in offsets.items()}

        def committed() -> dict[Any, Any]:
            self.world.cluster.groups.commit(group_id, flat)
            return {tp: kerrors.NoError for tp in offsets}

        return self._call("OffsetCommit", f"group {group_id} {flat}", committed)


def transaction_coordinator() -> Callable[..., Any]:
    """The product's ``TransactionCoordinator`` class, built on the model's client and channel."""
    from kafka_eos_ds.kafka.coordinator import TransactionCoordinator

    return functools.partial(TransactionCoordinator, admin_factory=ModelAdmin, channel_factory=ModelChannel)


