"""The Kafka sink's :class:`~kafka_eos_ds.twophase.Participants`: transactions by id.

commit = EndTxn(commit) with the task's producer id and epoch, sorted into an outcome
by :mod:`kafka_eos_ds.kafka_sink.commit_outcome` (asking the coordinator when the answer
alone cannot tell "already committed" from "lost"); unfit = DescribeTransactions (still
Ongoing under the task's producer id and epoch, with time left before its timeout);
fence = InitProducerId on the id (the transactions tool; the sink's own steps fence
exactly, below); open ids = ListTransactions filtered by the sink's prefix; carry = the
batch's source offsets added to the first transaction (AddOffsetsToTxn + TxnOffsetCommit)
while it is still open.

:class:`KafkaFences` is the sink's :class:`~kafka_eos_ds.twophase.protocol.Fences`:
observe = DescribeTransactions (each Ongoing transaction's producer id and epoch), claim =
a record committed by the step's decision writer (:meth:`.KafkaDecisionLog.claim`),
abort = EndTxn(abort) at that exact producer id and epoch, never InitProducerId: the
coordinator checks a client's EndTxn against the id's current epoch, so a transaction
begun since (a newer epoch) answers PRODUCER_FENCED, one committed since
INVALID_TXN_STATE, and neither is touched. Other batch jobs' transactions that no job can
decide any more: abandoned = ListTransactions of the prefix's job families, then
DescribeTransactions (each one's start and timeout); shut_out = InitProducerId on those
jobs' decision writers (never their transactions' ids).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping, Sequence

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.coordinator import (
    GROUP_AUTHORIZATION_FAILED,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    TOPIC_AUTHORIZATION_FAILED,
    TransactionCoordinator,
    TxnState,
    TxnStatus,
)
from kafka_eos_ds.kafka_sink import transactional_ids
from kafka_eos_ds.kafka_sink.commit_outcome import classify_described, classify_end_txn
from kafka_eos_ds.kafka_sink.config import MIN_COMMIT_TIMEOUT_MS
from kafka_eos_ds.kafka_sink.decision_log import WRITE_TIMEOUT_S, WRITER_TIMEOUT_MS, KafkaDecisionLog
from kafka_eos_ds.kafka_sink.messages import KafkaParticipant
from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import Instance, Outcome

log = logging.getLogger(__name__)

# EndTxn(abort) answers meaning the exact transaction is no longer the id's open one: begun
# again since (a newer epoch: PRODUCER_FENCED; INVALID_PRODUCER_EPOCH on older brokers), a
# new producer id or the id expired (INVALID_PRODUCER_ID_MAPPING), or ended otherwise,
# e.g. committed (INVALID_TXN_STATE). A commit still being written answers
# CONCURRENT_TRANSACTIONS, which is retried until it settles as one of these.
_MOVED_ON = frozenset({PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE})

# The last producer epoch a transaction can run under: the broker gives an id a new
# producer id when it initialises it at this epoch (Short.MaxValue - 1).
LAST_EPOCH = 32766

# Every batch job's family (identity.Kind.JOB).
_JOBS = "j*"


def commit_time_needed_s(commit_timeout_s: float) -> float:
    """How long each transaction must still have before its timeout for a batch to be
    decided: the decision write's bound, then ``commitTimeoutMs`` of retries for a commit
    whose coordinator is moving or restarting. A transaction the broker aborts for its
    timeout inside that span would be lost after the decision (every restart failing);
    refused before it, the batch is just run again."""
    return WRITE_TIMEOUT_S + commit_timeout_s


class KafkaTransactions:
    """Commits, fences and lists the transactions of one sink (one ``transactionalIdPrefix``)."""

    def __init__(self, coordinator: TransactionCoordinator, prefix: str, transaction_timeout_ms: int,
                 wall: Callable[[], float] = time.time) -> None:
        self.coordinator = coordinator
        self._wall = wall  # compared with the coordinator's transaction start times
        self.prefix = prefix
        self.transaction_timeout_ms = transaction_timeout_ms
        self._untold: dict[str, TxnState | None] = {}  # what the coordinator showed, per unknown outcome

    def commit(self, participant: KafkaParticipant) -> Outcome:
        pid, epoch = participant.handle.producer_id, participant.handle.epoch
        outcome = classify_end_txn(self.coordinator.end_txn(participant.id, pid, epoch, commit=True))
        if outcome is None:
            state = self.coordinator.describe(participant.id)
            outcome = classify_described(state, pid, epoch)
            if outcome is Outcome.UNKNOWN:
                self._untold[participant.id] = state
                log.warning("cannot tell whether %s committed: it ran under producer %s epoch %s; %s",
                            participant.id, pid, epoch, _shown(state))
        return outcome

    def carry(self, progress: Mapping[str, Any], participant: KafkaParticipant) -> None:
        group, offsets = str(progress["group"]), progress["offsets"]
        pid, epoch = participant.handle.producer_id, participant.handle.epoch
        # Only into the transaction itself: once it is past Ongoing, the offsets either
        # went with it or it is finished, and AddOffsetsToTxn would open a new one.
        if _in_state(self.coordinator.describe(participant.id), TxnStatus.ONGOING, pid, epoch):
            try:
                self.coordinator.send_offsets(participant.id, pid, epoch, group, offsets)
            except KafkaClientError as exc:
                if exc.code not in (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED):
                    raise
                # Before the decision (the committer attaches the offsets first): the batch
                # is refused undecided and its transactions are aborted, nothing shows.
                raise ConfigError(
                    f"Option 'sourceGroupId': the sink may not commit offsets to consumer group {group!r} inside "
                    f"its transactions ({exc}). Grant the sink's principal READ on group {group!r} and on the "
                    f"source topics {sorted(offsets)}, or remove 'sourceGroupId'. This batch was not committed; "
                    "nothing of it is in the output.") from exc

    def started(self, progress: Mapping[str, Any], first: KafkaParticipant) -> bool | None:
        pid, epoch = first.handle.producer_id, first.handle.epoch
        state = self.coordinator.describe(first.id)
        if state is not None and (state.producer_id, state.producer_epoch) == (pid, epoch):
            # The coordinator still holds our transaction: its state is the answer.
            return state.state in (TxnStatus.COMPLETE_COMMIT, TxnStatus.PREPARE_COMMIT)
        # The id expired, or its epoch moved on (a timeout abort or a fence, before or after
        # a commit): the group's offsets, which rode in the transaction, tell.
        held = self.coordinator.group_offsets(str(progress["group"]), progress["offsets"])
        return group_reached(progress["offsets"], held)

    def abandoned_message(self, progress: Mapping[str, Any], first: KafkaParticipant) -> str:
        return (f"The consumer group '{progress['group']}' (option 'sourceGroupId') holds offsets before the batch's "
                f"end offsets {dict(progress['offsets'])}. Usually the broker's timeout aborted it: the sink option "
                f"'kafka.transaction.timeout.ms' (now {self.transaction_timeout_ms} ms, at most the broker's "
                "'transaction.max.timeout.ms') must cover a batch's write, its commit and the driver's pauses.")

    def resumes_before(self, progress: Mapping[str, Any], reached: bool = True) -> str | None:
        group, offsets = str(progress["group"]), progress["offsets"]
        held = self.coordinator.group_offsets(group, offsets)
        # Every partition at or past the output's end: a group behind anywhere (offsets
        # reset by hand, or moved back) would have the new query write that part again.
        # Not reached (an abandoned batch's end): the output ends before it, where the
        # progress does not say, so only a group that lost a partition's offsets is known wrong.
        behind = {f"{topic}-{part}": held.get(topic, {}).get(str(part)) for topic, parts in offsets.items()
                  for part, end in parts.items()
                  if held.get(topic, {}).get(str(part)) is None
                  or (reached and int(held[topic][str(part)]) < int(end))}
        if not behind:
            return None
        if len(behind) == sum(len(parts) for parts in offsets.values()) and all(v is None for v in behind.values()):
            holds = "holds no offsets for the input"
        else:
            shown = ", ".join(f"{tp}: {'none' if v is None else v}" for tp, v in sorted(behind.items()))
            holds = f"holds offsets before them ({shown})" if reached else f"holds no offsets for {shown}"
        return (f"the consumer group '{group}' (option 'sourceGroupId') {holds}, while batch {{batch}} ended at "
                f"offsets {dict(offsets)} "
                "(docs/troubleshooting.md, \"A new query cannot start where the output ends\").")

    def unknown_message(self, progress: Mapping[str, Any], first: KafkaParticipant) -> str:
        group = progress["group"]
        return (f"the coordinator no longer knows its first transaction {first.id} as it ran, and the consumer "
                f"group '{group}' (option 'sourceGroupId') holds neither the batch's end offsets "
                f"{dict(progress['offsets'])} nor offsets before them (docs/troubleshooting.md, "
                "\"Cannot tell whether a lost checkpoint's last batch had started to commit\").")

    def unfit(self, participants: Sequence[KafkaParticipant], time_needed_s: float) -> str | None:
        # One DescribeTransactions per coordinator. The time left is counted on the
        # broker's clock (the transaction's start) against ours: clock skew between the
        # driver and the brokers eats into the margin.
        _warn_last_epoch(participants)
        states = self.coordinator.describe_many([p.id for p in participants])
        # A margin longer than the timeout itself would refuse every batch: at most half of
        # it. With a timeout that short, a commit that needs its whole retry budget can still
        # be lost (docs/fault-tolerance.md says which timeouts cover it).
        needed_ms = min(time_needed_s * 1000, self.transaction_timeout_ms / 2)
        now_ms = self._wall() * 1000
        problems = [problem for p in participants
                    if (problem := _unfit(p, states.get(p.id), needed_ms, now_ms)) is not None]
        if not problems:
            return None
        return (f"{len(problems)} of its {len(participants)} transaction(s) can no longer be committed "
                f"({'; '.join(problems)}); usually the broker aborted them for their timeout, and the sink option "
                f"'kafka.transaction.timeout.ms' (now {self.transaction_timeout_ms} ms, at most the broker's "
                "'transaction.max.timeout.ms') must cover a batch's write and commit, or 'maxOffsetsPerTrigger' "
                "bound the batch (docs/troubleshooting.md, "
                "\"Batch N was not committed: transactions can no longer be committed\").")

    def unknown_outcome_message(self, participants: Sequence[KafkaParticipant]) -> str:
        seen = "; ".join(f"{p.id} ran under producer {p.handle.producer_id} epoch {p.handle.epoch}, "
                         f"{_shown(self._untold.get(p.id))}" for p in participants)
        return (f"{seen}; each fits an abort (the broker's timeout, sink option 'kafka.transaction.timeout.ms', "
                f"now {self.transaction_timeout_ms} ms, at most the broker's 'transaction.max.timeout.ms'; or another "
                "writer of the id) as well as a commit after which the id was initialised again or expired "
                "('transactional.id.expiration.ms'), so every restart stops here until a read_committed consumer "
                "has checked the output for the batch's records "
                "(docs/troubleshooting.md, \"TransactionError: Cannot tell whether batch N of query Q committed\").")

    def fence(self, participant_id: str) -> None:
        self.coordinator.fence(participant_id, self.transaction_timeout_ms)

    def observe(self, ids: Sequence[str]) -> list[Instance]:
        # Only an Ongoing transaction needs an abort (Prepare* ones are ending by themselves).
        states = self.coordinator.describe_many(ids)
        return [Instance(tid, f"{state.producer_id}/{state.producer_epoch}") for tid, state in states.items()
                if state is not None and state.state == TxnStatus.ONGOING]

    def abort_exact(self, instance: Instance) -> bool:
        pid, _, epoch = instance.tag.partition("/")
        code = self.coordinator.end_txn(instance.id, int(pid), int(epoch), commit=False)
        if code in _MOVED_ON:
            return False
        # NONE: aborted (or had been, by an earlier try); any other code is raised, a
        # retriable one (a coordinator moving, a commit or abort still being written) retried.
        TransactionCoordinator._raise_for(code, f"EndTxn(abort) of {instance.id} at producer {pid} epoch {epoch}")
        return code == NONE

    def abandoned(self, write: WriteId) -> list[Instance]:
        """The Ongoing instances of other batch jobs' families (``j…``, not ``write``'s)
        with less time left before their timeout than any job's commit asks before it
        decides (:func:`commit_time_needed_s` of the least 'commitTimeoutMs', at most half
        the timeout, as in ``unfit``): no job can decide them any more. Counted on the
        broker's clock (the start) against ours, as ``unfit`` is."""
        listed = self.coordinator.list_transactions(transactional_ids.pattern(self.prefix, _JOBS))
        ids = [tid for tid, _pid, state in listed
               if state == TxnStatus.ONGOING and transactional_ids.in_families(self.prefix, tid, _JOBS)
               and not transactional_ids.in_families(self.prefix, tid, write.family)]
        now_ms = self._wall() * 1000
        least_s = commit_time_needed_s(MIN_COMMIT_TIMEOUT_MS / 1000)
        return [Instance(tid, f"{state.producer_id}/{state.producer_epoch}")
                for tid, state in self.coordinator.describe_many(ids).items()
                if state is not None and state.state == TxnStatus.ONGOING and state.start_time_ms >= 0
                and state.timeout_ms > 0
                and state.start_time_ms + state.timeout_ms - now_ms < min(least_s * 1000, state.timeout_ms / 2)]

    def shut_out(self, instances: Sequence[Instance]) -> None:
        """InitProducerId on the decision writer of each family of ``instances``: a write
        (or the claim) of that writer's current producer fails from now on."""
        families = sorted({parsed.family for i in instances
                           if (parsed := transactional_ids.parse(self.prefix, i.id)) is not None})
        for family in families:
            self.coordinator.fence(transactional_ids.decision_writer(self.prefix, family),
                                   min(WRITER_TIMEOUT_MS, self.transaction_timeout_ms))

    def superseded(self, participant: KafkaParticipant) -> Sequence[str]:
        # Also for a participant without a transaction of its own (no rows): the
        # earlier attempts of its task may still hold theirs open.
        parsed = transactional_ids.parse(self.prefix, participant.id) if participant.id else None
        family = parsed.family if parsed is not None else participant.handle.family
        return transactional_ids.lower_attempts(self.prefix, participant.partition, participant.attempt, family)

    def open_ids(self, write: WriteId) -> Sequence[str]:
        families = write.families
        listed = self.coordinator.list_transactions(transactional_ids.pattern(self.prefix, families))
        # Only an Ongoing transaction needs an abort. PrepareCommit/PrepareAbort are ending
        # by themselves: typically the last batch's commits, whose markers the coordinator
        # is still writing when the next batch's recovery looks (fencing one only waits
        # for it to end, and was logged as "aborting leftover transactions").
        return [tid for tid, _pid, state in listed
                if state == TxnStatus.ONGOING and transactional_ids.in_families(self.prefix, tid, families)]

    def known_ids(self, write: WriteId) -> list[str]:
        """Ids of ``write``'s families the coordinators know in any state (they keep an id
        for the broker's ``transactional.id.expiration.ms`` after its last transaction)."""
        families = write.families
        listed = self.coordinator.list_transactions(transactional_ids.pattern(self.prefix, families),
                                                    open_only=False)
        return [tid for tid, _pid, _state in listed if transactional_ids.in_families(self.prefix, tid, families)]

    def lost_message(self, participants: Sequence[KafkaParticipant]) -> str:
        return ("Usually the broker's timeout aborted them: the sink option 'kafka.transaction.timeout.ms' (now "
                f"{self.transaction_timeout_ms} ms, at most the broker's 'transaction.max.timeout.ms') must cover a "
                "batch's write and commit. A streaming query's every restart fails the same way until the batch's "
                "input is processed again (docs/troubleshooting.md, "
                "\"TransactionLostError: Batch N of query Q was decided but … were aborted\").")


class KafkaFences:
    """The Kafka sink's exact fencing (module docstring): the transactions of
    ``transactions``, claimed through the step's decision log ``decisions``."""

    def __init__(self, transactions: KafkaTransactions, decisions: KafkaDecisionLog) -> None:
        self.transactions = transactions
        self.decisions = decisions

    def observe(self, ids: Sequence[str]) -> list[Instance]:
        return self.transactions.observe(ids)

    def claim(self, targets: Sequence[Instance]) -> None:
        self.decisions.claim()

    def abort_exact(self, instance: Instance) -> bool:
        return self.transactions.abort_exact(instance)

    def abandoned(self, write: WriteId) -> list[Instance]:
        return self.transactions.abandoned(write)

    def shut_out(self, instances: Sequence[Instance]) -> None:
        self.transactions.shut_out(instances)


def _warn_last_epoch(participants: Sequence[KafkaParticipant]) -> None:
    """Every task initialises its id once per batch, so an id reaches the last epoch every
    ~32,000 batches. Committing such a transaction is fine; fencing it or its timeout
    abort is not on brokers before 4.1.0 with transaction version 2, which overflow the
    epoch there and leave the transaction hanging (docs/fault-tolerance.md). Warned here,
    where the driver sees every task's epoch at no cost, so a hang has its explanation
    in the driver's log."""
    for p in participants:
        pid, epoch = p.handle.producer_id, p.handle.epoch
        if epoch >= LAST_EPOCH:
            log.warning("%s runs at producer epoch %d, the last before its producer id %d is replaced. On brokers "
                        "before Apache Kafka 4.1.0 with the transaction.version feature at 2, aborting this "
                        "transaction (a fence, or its timeout) overflows the epoch in the transaction coordinator, "
                        "and the transaction stays open, stalling read_committed readers of its partitions: "
                        "upgrade the brokers, or set transaction.version to 1 (docs/fault-tolerance.md).",
                        p.id, epoch, pid)


def _shown(state: TxnState | None) -> str:
    if state is None:
        return "its coordinator no longer knows the id"
    return f"its coordinator now shows producer {state.producer_id} epoch {state.producer_epoch}, {state.state}"


def _unfit(participant: KafkaParticipant, state: TxnState | None, needed_ms: float, now_ms: float) -> str | None:
    """Why ``participant`` cannot be committed now, or None."""
    pid, epoch = participant.handle.producer_id, participant.handle.epoch
    if state is None:
        return f"{participant.id}: unknown to its coordinator"
    if (state.producer_id, state.producer_epoch) != (pid, epoch):
        return (f"{participant.id}: now held by producer {state.producer_id} epoch {state.producer_epoch}, "
                f"not the task's {pid} epoch {epoch} (aborted by a timeout or by another writer)")
    if state.state != TxnStatus.ONGOING:
        return f"{participant.id}: {state.state}, not Ongoing"
    if state.start_time_ms >= 0 and state.timeout_ms > 0:
        left_ms = state.start_time_ms + state.timeout_ms - now_ms
        if left_ms < needed_ms:
            return (f"{participant.id}: open for {(now_ms - state.start_time_ms) / 1000:.1f}s of its "
                    f"{state.timeout_ms / 1000:.1f}s timeout, {needed_ms / 1000:.1f}s needed to commit")
    return None


def _in_state(state: TxnState | None, status: TxnStatus, producer_id: int, epoch: int) -> bool:
    """Whether the coordinator holds *our* transaction (same producer id and epoch) in ``status``."""
    return (state is not None and state.state == status
            and (state.producer_id, state.producer_epoch) == (producer_id, epoch))


def group_reached(progress: Mapping[str, Mapping[str, int]], group: Mapping[str, Mapping[str, int]]) -> bool | None:
    """Where the group's committed offsets stand against a batch's end offsets ``progress``.

    True: exactly there (the batch's first transaction, which carried them, committed).
    False: every partition at or before them, some before (it did not commit; the group
    holds an earlier batch's offsets). None: anything else (no offsets, or offsets
    beyond the batch): it cannot be told.
    """
    behind = False
    for topic, parts in progress.items():
        for part, end in parts.items():
            at = group.get(topic, {}).get(str(part))
            if at is None or at > int(end):
                return None
            behind = behind or at < int(end)
    return not behind
