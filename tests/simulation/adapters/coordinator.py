"""THIN ADAPTER for ``kafka_eos_ds.kafka.coordinator.TransactionCoordinator`` (kafka-python
requests for another process's transactions): the real ``KafkaTransactions`` and
``commit_outcome`` run on it."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from kafka_eos_ds.errors import ConfigError, KafkaClientError, TransactionError
from kafka_eos_ds.kafka.coordinator import OPEN_STATES, TxnState
from tests.simulation import world as sim
from tests.simulation.adapters.requests import RETRIABLE, raise_for, request
from tests.simulation.model import errors as e
from tests.simulation.model.logs import OFFSETS_TOPIC


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
        return request("EndTxn", f"{transactional_id} pid {producer_id} e{epoch} {what}",
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
                code = request("InitProducerId", f"{transactional_id} (fence)",
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
        view = request("DescribeTransactions", transactional_id, lambda: self.tc.describe(transactional_id))
        return None if view is None else _txn_state(view)

    def describe_many(self, transactional_ids: Sequence[str]) -> dict[str, Optional[TxnState]]:
        ids = list(dict.fromkeys(transactional_ids))
        if not ids:
            return {}
        views = request("DescribeTransactions", ", ".join(ids), lambda: {t: self.tc.describe(t) for t in ids})
        return {t: (None if v is None else _txn_state(v)) for t, v in views.items()}

    def list_transactions(self, id_regex: Optional[str] = None, open_only: bool = True) -> list[tuple[str, int, str]]:
        from tests.simulation.model.coordinator import TxnState as S

        states = [S(s.value) for s in OPEN_STATES if s.value in S._value2member_map_] if open_only else None

        def listed() -> list[tuple[str, int, str]]:
            self.world.on_listing(id_regex)
            return [(tid, pid, state.value) for tid, pid, state in self.tc.list_transactions(states, id_regex)]

        return request("ListTransactions", id_regex or "", listed)

    def send_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                     offsets: Mapping[str, Mapping[str, int]]) -> None:
        code = request("AddOffsetsToTxn", f"{transactional_id} group {group_id}",
                        lambda: self.tc.add_partitions(transactional_id, producer_id, epoch,
                                                       [(OFFSETS_TOPIC, group_id)]), unavailable=lambda c: c)
        raise_for(code, f"AddOffsetsToTxn({transactional_id}, group {group_id!r})")
        flat = {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}
        code = request("TxnOffsetCommit", f"{transactional_id} group {group_id} {flat}",
                        lambda: self.world.cluster.txn_offset_commit(transactional_id, producer_id, epoch, group_id,
                                                                     flat), unavailable=lambda c: c)
        raise_for(code, f"TxnOffsetCommit({transactional_id}, group {group_id!r})")

    def commit_offsets(self, group_id: str, offsets: Mapping[str, Mapping[str, int]]) -> None:
        flat = {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}
        request("OffsetCommit", f"group {group_id} {flat}", lambda: self.world.cluster.groups.commit(group_id, flat))

    def group_offsets(self, group_id: str) -> dict[str, dict[str, int]]:
        found = request("OffsetFetch", f"group {group_id}", lambda: self.world.cluster.groups.offsets(group_id))
        out: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(found.items()):
            out.setdefault(topic, {})[str(partition)] = offset
        return out
