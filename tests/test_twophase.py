"""The two-phase-commit protocol without a broker: policy and driver ordering."""

from __future__ import annotations

import pytest

from kafka_eos_ds.errors import KafkaClientError, TransactionError, TransactionLostError, TransactionOutcomeUnknownError
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.twophase import (
    ABANDONED,
    DECIDED,
    DONE,
    Decision,
    DoneMark,
    Kind,
    Outcome,
    Participant,
    RecoveryContext,
    TwoPhaseCommitter,
    WriteId,
    faults,
    plan_abort,
    plan_commit,
    plan_recovery,
)
from kafka_eos_ds.twophase.protocol import DecisionState
from kafka_eos_tools import faults as injection


def part(i, attempt=0, records=10):
    return Participant(f"p-{i}-{attempt}", i, attempt, records, KafkaHandle(100 + i, 1))


# -- pure policy ------------------------------------------------------------

def test_recovery_of_a_fresh_sink_fences_every_open_id():
    plan = plan_recovery(RecoveryContext(None, ["p-1-0", "p-0-0"]))
    assert plan.finish is None and plan.fence == ("p-0-0", "p-1-0") and plan.mark == DoneMark()


def test_recovery_finishes_an_unfinished_decision_and_never_fences_its_ids():
    decided = Decision("q", 7, DECIDED, (part(0), part(1)))
    plan = plan_recovery(RecoveryContext(decided, ["p-0-0", "p-1-0", "p-2-0", "p-0-1"]))
    assert plan.finish == decided
    assert plan.fence == ("p-0-1", "p-2-0")
    assert plan.mark == DoneMark("q", 7)


def test_recovery_after_a_done_batch_only_fences_leftovers():
    plan = plan_recovery(RecoveryContext(Decision("q", 7, DONE, (part(0),)), ["p-0-0"]))
    assert plan.finish is None and plan.fence == ("p-0-0",) and plan.mark == DoneMark("q", 7)


def test_done_mark_covers_only_earlier_or_equal_batches_of_the_same_query():
    mark = DoneMark("q", 7)
    assert mark.covers("q", 7) and mark.covers("q", 3)
    assert not mark.covers("q", 8) and not mark.covers("other", 1) and not mark.covers(None, 1)
    assert not DoneMark().covers("q", 0)


def test_commit_of_a_done_batch_is_a_noop():
    assert plan_commit(Decision("q", 3, DONE), "q", 3, [part(0)]).noop


def test_commit_of_a_decided_batch_uses_the_recorded_participants_not_new_ones():
    decided = Decision("q", 3, DECIDED, (part(0),))
    plan = plan_commit(decided, "q", 3, [part(0, attempt=2), part(1)])
    assert plan.decision == decided and not plan.write_decision


def test_commit_drops_empty_and_failed_slots_and_remembers_an_unfinished_earlier_batch():
    earlier = Decision("q", 2, DECIDED, (part(5),))
    plan = plan_commit(earlier, "q", 3, [None, part(1), part(0, records=0)])
    assert plan.decision.participants == (part(1),) and plan.earlier == earlier and plan.write_decision


def test_abort_leaves_a_decided_batch_to_recovery():
    assert plan_abort(Decision("q", 3, DECIDED, (part(0),)), "q", 3, [part(0)], [], ["p-0-0"]) == ()
    assert plan_abort(Decision("q", 3, DONE), "q", 3, [part(0)]) == ()
    assert plan_abort(Decision("q", 3, DONE), "q", 3, [part(0)], [], ["p-7-0"]) == ("p-7-0",)


def test_abort_of_an_undecided_batch_fences_its_transactions_and_superseded_attempts():
    ids = plan_abort(Decision("q", 2, DONE), "q", 3, [part(0), None, part(1, records=0)], ["p-0-x"])
    assert ids == ("p-0-0", "p-0-x")


def test_abort_also_fences_open_ids_without_a_message_but_never_a_decided_one():
    # A task killed when its stage was cancelled reports no message; its id is still open.
    assert plan_abort(Decision("q", 2, DONE), "q", 3, [part(0)], [], ["p-1-0"]) == ("p-0-0", "p-1-0")
    decided = Decision("q", 3, DECIDED, (part(0),))
    assert plan_abort(decided, "q", 3, [part(0)], [], ["p-0-0", "p-1-1"]) == ("p-1-1",)
    earlier = Decision("q", 2, DECIDED, (part(5),))
    assert plan_abort(earlier, "q", 3, [part(0)], [], ["p-5-0"]) == ("p-0-0",)


def test_decisions_round_trip_through_json():
    d = Decision("q", 3, DECIDED, (part(0), part(1, attempt=1)))
    assert Decision.from_json(d.to_json(), KafkaHandle.from_json) == d
    with_progress = Decision("q", 3, DECIDED, (part(0),), {"group": "g", "offsets": {"in": {"0": 5}}})
    assert Decision.from_json(with_progress.to_json(), KafkaHandle.from_json) == with_progress
    done = Decision.from_json(with_progress.with_state(DONE).to_json(), KafkaHandle.from_json)
    assert done.progress == with_progress.progress


PROGRESS = {"group": "g", "offsets": {"in": {"0": 50, "1": 40}}}


def test_recovery_of_another_querys_decision_with_progress_is_conditional():
    decided = Decision("old", 7, DECIDED, (part(0), part(1)), PROGRESS)
    assert plan_recovery(RecoveryContext(decided, [], "new")).only_if_started
    # Same query (checkpoint intact), unknown query, or no progress carried: finish as always.
    assert not plan_recovery(RecoveryContext(decided, [], "old")).only_if_started
    assert not plan_recovery(RecoveryContext(decided, [], None)).only_if_started
    plain = Decision("old", 7, DECIDED, (part(0),))
    assert not plan_recovery(RecoveryContext(plain, [], "new")).only_if_started


def test_an_abandoned_batch_is_decided_afresh_and_marks_nothing_done():
    abandoned = Decision("q", 7, ABANDONED, (part(0),), PROGRESS)
    assert plan_recovery(RecoveryContext(abandoned, ["p-0-0"], "q")).mark == DoneMark()
    plan = plan_commit(abandoned, "q", 7, [part(0, attempt=1)], PROGRESS)
    assert plan.write_decision and plan.decision.participants == (part(0, attempt=1),)
    assert plan.earlier is None


# -- the driver's ordering, with fakes ---------------------------------------

def stream(query, batch=-1):
    return WriteId(Kind.STREAM, query, batch)


class FakeLog:
    """A decision log: (key, decision) records in write order; the latest per key wins."""

    def __init__(self, latest=None, key=None):
        self.records = [(key or f"q:{latest.query_id}", latest)] if latest else []
        self.events = None

    def latest(self, key=None):
        found = [d for k, d in self.records if key is None or k == key]
        return found[-1] if found else None

    def latest_of(self, kind):
        found = [d for k, d in self.records if k.startswith(kind + ":") and d is not None]
        return found[-1] if found else None

    def unfinished(self, kind):
        last = {k: d for k, d in self.records if k.startswith(kind + ":")}
        return [(k, d) for k, d in last.items() if d is not None and d.state == DECIDED]

    def write(self, key, decision):
        self.records.append((key, decision))
        self.events.append(("write", decision.batch_id, decision.state))

    def forget(self, key):
        self.records.append((key, None))
        self.events.append(("forget", key))


class FakeParticipants:
    def __init__(self, events, outcomes=None, open_ids=()):
        self.events, self.outcomes, self._open = events, dict(outcomes or {}), list(open_ids)
        self.checked = []
        self._ended: set = set()  # committed here: no longer Ongoing, as on a broker
        self.reopened: list = []  # open again after their commit (a zombie's late InitProducerId)

    def commit(self, p):
        self.events.append(("commit", p.id))
        todo = self.outcomes.get(p.id, [Outcome.COMMITTED])
        outcome = todo.pop(0) if len(todo) > 1 else todo[0]
        if outcome is Outcome.COMMITTED:
            self._ended.add(p.id)
        return outcome

    unfit_reason = None

    def unfit(self, parts, time_needed_s):
        # Kept apart from events, which record what changes state.
        self.checked.append((tuple(p.id for p in parts), list(self.events)))
        return self.unfit_reason

    def fence(self, pid):
        self.events.append(("fence", pid))

    def superseded(self, p):
        return [f"p-{p.partition}-{a}" for a in range(p.attempt)]

    def open_ids(self, write):
        return [i for i in self._open if i not in self._ended] + self.reopened

    def lost_message(self, parts):
        return "check kafka.transaction.timeout.ms"

    def unknown_outcome_message(self, parts):
        return "look for their records in the output"

    committed_ids: set = set()

    def carry(self, progress, p):
        self.events.append(("carry", p.id if p is not None else None, progress["offsets"]))

    unknown: bool = False  # whether started() cannot tell (an expired id, a group without offsets)

    def started(self, progress, p):
        return None if self.unknown else p.id in self.committed_ids

    def unknown_message(self, progress, p):
        return f"{p.id} is unknown"

    def abandoned_message(self, progress, p):
        return "the group holds offsets before the batch's; check kafka.transaction.timeout.ms"

    lost_offsets: bool = False  # whether the store lost where the output ends (expired group offsets)

    def resumes_before(self, progress, reached=True):
        return "the group holds no offsets; batch {batch} ended there" if self.lost_offsets else None


def committer(latest=None, outcomes=None, open_ids=(), timeout=5.0, committed_ids=()):
    events = []
    log = FakeLog(latest)
    log.events = events
    clock = [0.0]
    participants = FakeParticipants(events, outcomes, open_ids)
    participants.committed_ids = set(committed_ids)
    tpc = TwoPhaseCommitter(log, participants, progress_store=participants, commit_timeout_s=timeout,
                            parallelism=1, sleep=lambda s: clock.__setitem__(0, clock[0] + s), clock=lambda: clock[0])
    return tpc, log, events


def test_commit_writes_the_decision_before_the_first_transaction_and_done_after_the_last():
    tpc, log, events = committer()
    tpc.commit(stream("q", 1), [part(0), part(1, attempt=2)])
    assert events == [("write", 1, DECIDED), ("commit", "p-0-0"), ("commit", "p-1-2"),
                      ("fence", "p-1-0"), ("fence", "p-1-1"), ("write", 1, DONE)]
    assert tpc.participants.checked == [(("p-0-0", "p-1-2"), [])]   # checked before anything was written


def test_a_batch_whose_participants_cannot_commit_is_refused_before_the_decision():
    """A participant aborted by its timeout, or taken over by another writer, would be lost
    after the decision and fail every restart: the batch is refused undecided instead."""
    tpc, log, events = committer()
    tpc.participants.unfit_reason = "p-1-0 was aborted; raise kafka.transaction.timeout.ms"
    with pytest.raises(TransactionError, match="not committed: p-1-0 was aborted.*kafka.transaction") as info:
        tpc.commit(stream("q", 1), [part(0), part(1)])
    assert info.value.retriable
    assert log.latest() is None and events == [] and tpc.participants.checked[0][0] == ("p-0-0", "p-1-0")
    tpc.abort(stream("q", 1), [part(0), part(1)])      # what Spark does next: both are fenced
    assert ("fence", "p-0-0") in events and ("fence", "p-1-0") in events


def test_a_commit_that_finishes_another_drivers_decision_of_its_batch_aborts_its_own_transactions():
    """A driver presumed dead came back and decided batch 1 with its tasks' transactions
    while the new driver ran it too; the new driver finishes that decision, and its own
    tasks' transactions, in no decision, are aborted at once (found by the simulation's
    exploration, stream seed 302360: before, they stayed open after the query finished)."""
    decided = Decision("q", 1, DECIDED, (part(0),))
    tpc, log, events = committer(latest=decided)
    tpc.commit(stream("q", 1), [part(0, attempt=1), part(1)])
    assert ("commit", "p-0-0") in events and log.latest().state == DONE
    assert ("fence", "p-0-1") in events and ("fence", "p-1-0") in events
    assert ("fence", "p-0-0") not in events and ("commit", "p-1-0") not in events


def test_a_decided_id_open_again_after_its_commit_is_swept():
    """A zombie task of an earlier batch whose InitProducerId reached the coordinator late
    opened a new transaction on the id the batch just committed; the sweep used to spare
    every id of the decision, and the transaction held readers back after the last batch
    (found by the simulation's exploration, checkpoint-lost seed 302343)."""
    tpc, log, events = committer()
    tpc.participants.reopened = ["p-0-0"]
    tpc.commit(stream("q", 1), [part(0)])
    assert events.index(("commit", "p-0-0")) < events.index(("fence", "p-0-0"))
    assert log.latest().state == DONE


def test_a_redone_commit_of_a_decided_batch_is_not_checked_again():
    decided = Decision("q", 1, DECIDED, (part(0),))
    tpc, log, events = committer(latest=decided)
    tpc.participants.unfit_reason = "would refuse"
    tpc.commit(stream("q", 1), [part(0)])
    assert log.latest().state == DONE and tpc.participants.checked == []


def test_after_the_commit_every_other_open_id_is_fenced_whatever_its_attempt():
    """Losing attempts of speculation (a higher attempt number than the winner's) and other
    leftovers hold back read_committed readers until fenced; the winners never are."""
    tpc, log, events = committer(open_ids=["p-0-1", "p-1-0", "p-3-0"])
    tpc.commit(stream("q", 1), [part(0), part(1)])
    fenced = [e[1] for e in events if e[0] == "fence"]
    assert fenced == ["p-0-1", "p-3-0"]
    assert events.index(("commit", "p-1-0")) < events.index(("fence", "p-0-1")) < events.index(("write", 1, DONE))


def test_commit_is_idempotent_per_batch():
    tpc, log, events = committer()
    tpc.commit(stream("q", 1), [part(0)])
    events.clear()
    tpc.commit(stream("q", 1), [part(0)])
    assert events == []


def test_a_lost_decided_transaction_fails_loudly_and_leaves_the_decision():
    tpc, log, events = committer(outcomes={"p-1-0": [Outcome.LOST]})
    with pytest.raises(TransactionLostError, match="kafka.transaction.timeout.ms"):
        tpc.commit(stream("q", 1), [part(0), part(1)])
    assert log.latest().state == DECIDED


def test_a_decided_transaction_whose_outcome_cannot_be_told_fails_loudly_never_as_lost():
    """"Lost" tells the operator the records are not in the output, and its remedy
    re-writes the batch: only proof of an abort may say so. When the evidence is gone
    the step fails, non-retriable, and says what to check; the decision stays."""
    tpc, log, events = committer(outcomes={"p-0-0": [Outcome.UNKNOWN]})
    with pytest.raises(TransactionError, match="Cannot tell whether batch 1 of query q committed.*1 of its 2 "
                                               ".*look for their records in the output") as info:
        tpc.commit(stream("q", 1), [part(0), part(1)])
    assert not isinstance(info.value, TransactionLostError) and not info.value.retriable
    assert "not in the output" not in str(info.value)
    assert ("commit", "p-1-0") in events and log.latest().state == DECIDED
    # Recovery finishing the decision stops the same way, and marks nothing done.
    with pytest.raises(TransactionError, match="Cannot tell whether batch 1"):
        tpc.recover(stream("q"))
    assert log.latest().state == DECIDED


def test_unknown_outcomes_are_retried_then_fail_retriably_keeping_the_decision():
    tpc, log, _ = committer(outcomes={"p-0-0": [Outcome.RETRY, Outcome.RETRY, Outcome.COMMITTED]})
    tpc.commit(stream("q", 1), [part(0)])
    assert log.latest().state == DONE
    tpc, log, _ = committer(outcomes={"p-0-0": [Outcome.RETRY]}, timeout=1.0)
    with pytest.raises(TransactionError) as info:
        tpc.commit(stream("q", 1), [part(0)])
    assert info.value.retriable and log.latest().state == DECIDED


@pytest.fixture
def hooked():
    """The crash tests' fault hook, installed as KAFKA_EOS_FAULT_HOOK installs it in Spark."""
    faults.install(injection.inject)
    yield
    faults.install(None)


def test_abort_after_a_partial_commit_touches_nothing(monkeypatch, hooked):
    monkeypatch.setenv("KAFKA_EOS_FAULT", "commit-raise@1")
    tpc, log, events = committer(open_ids=["p-1-0"])
    with pytest.raises(injection.InjectedFault):
        tpc.commit(stream("q", 1), [part(0), part(1)])
    monkeypatch.delenv("KAFKA_EOS_FAULT")
    events.clear()
    tpc.abort(stream("q", 1), [part(0), part(1)])
    assert events == []


def test_abort_of_an_undecided_batch_fences_its_transactions():
    tpc, log, events = committer(latest=Decision("q", 0, DONE))
    tpc.abort(stream("q", 1), [part(0), None])
    assert events == [("fence", "p-0-0")]


def test_recover_finishes_the_decision_then_fences_the_rest():
    decided = Decision("q", 4, DECIDED, (part(0),))
    tpc, log, events = committer(latest=decided, open_ids=["p-0-0", "p-1-0"])
    mark = tpc.recover(stream("q"), known_query=False)
    assert events == [("commit", "p-0-0"), ("write", 4, DONE), ("fence", "p-1-0")]
    assert mark == DoneMark("q", 4)


def test_progress_rides_in_the_first_participant_attached_before_the_decision():
    tpc, log, events = committer()
    tpc.commit(stream("q", 1), [part(1), part(0)], PROGRESS)
    assert events[:3] == [("carry", "p-0-0", PROGRESS["offsets"]), ("write", 1, DECIDED), ("commit", "p-0-0")]
    assert log.latest().progress == PROGRESS


def test_progress_that_cannot_be_attached_refuses_the_batch_undecided():
    """A group the sink may not commit to (a missing ACL, a group with members) fails the
    attachment: before the decision that refuses the batch cleanly; after it, the decided
    batch would be stuck until its transactions time out and are lost."""
    tpc, log, events = committer()

    def refuse(progress, participant):
        raise KafkaClientError("GROUP_AUTHORIZATION_FAILED", retriable=False)

    tpc.participants.carry = refuse
    with pytest.raises(KafkaClientError, match="GROUP_AUTHORIZATION_FAILED"):
        tpc.commit(stream("q", 1), [part(0), part(1)], PROGRESS)
    assert log.latest() is None and events == []


def test_progress_of_a_batch_without_output_is_stored_with_its_done_record():
    tpc, log, events = committer()
    tpc.commit(stream("q", 1), [part(0, records=0)], PROGRESS)
    assert events == [("write", 1, DONE)]  # the record stores it (DecisionLog.write), no plain offset commit
    assert log.latest() == Decision("q", 1, DONE, (), PROGRESS)


def test_recovery_finishing_a_legacy_decision_attaches_its_progress_again():
    """A decision written before progress was attached ahead of it (no progressAttached
    mark): the attachment may never have happened. A marked decision is never attached
    again (tests/test_progress_attached.py)."""
    decided = Decision("q", 4, DECIDED, (part(0), part(1)), PROGRESS)
    assert not decided.progress_attached
    tpc, log, events = committer(latest=decided)
    tpc.recover(stream("q"))
    assert events[:2] == [("carry", "p-0-0", PROGRESS["offsets"]), ("commit", "p-0-0")]
    assert log.latest().state == DONE


def test_a_lost_checkpoints_decision_none_of_which_committed_is_abandoned():
    decided = Decision("old", 4, DECIDED, (part(0), part(1)), PROGRESS)
    tpc, log, events = committer(latest=decided, open_ids=["p-0-0", "p-1-0", "p-2-0"])
    mark = tpc.recover(stream("new"))
    assert ("commit", "p-0-0") not in events and ("commit", "p-1-0") not in events
    assert {("fence", "p-0-0"), ("fence", "p-1-0"), ("fence", "p-2-0")} <= set(events)
    assert log.latest().state == ABANDONED and mark == DoneMark()


def test_a_lost_checkpoints_decision_whose_first_participant_committed_is_finished():
    decided = Decision("old", 4, DECIDED, (part(0), part(1)), PROGRESS)
    tpc, log, events = committer(latest=decided, open_ids=["p-1-0"], committed_ids={"p-0-0"})
    tpc.recover(stream("new"))
    assert ("commit", "p-1-0") in events and ("fence", "p-1-0") not in events
    assert log.latest().state == DONE


@pytest.mark.parametrize("first", [Outcome.LOST, Outcome.UNKNOWN])
def test_a_batch_whose_first_transaction_was_aborted_after_the_decision_is_abandoned_not_half_committed(first):
    """The first participant carries the progress: if the group shows it never committed,
    committing the others would leave the batch partly visible, and a query replacing this
    one after a lost checkpoint would re-read (and write again) what they made visible.
    None is committed; the restarted query runs the batch again."""
    tpc, log, events = committer(outcomes={"p-0-0": [first]})
    with pytest.raises(TransactionError, match="Batch 1 of query q was not committed: its first transaction p-0-0.*"
                                               "recorded abandoned") as info:
        tpc.commit(stream("q", 1), [part(0), part(1)], PROGRESS)
    assert info.value.retriable and not isinstance(info.value, TransactionLostError)
    assert ("commit", "p-1-0") not in events and log.latest().state == ABANDONED
    abandoned = events.index(("write", 1, ABANDONED))
    assert {e for e in events[abandoned:] if e[0] == "fence"} == {("fence", "p-0-0"), ("fence", "p-1-0")}
    # The restart: recovery finishes nothing, and the batch is decided afresh and committed.
    assert tpc.recover(stream("q")) == DoneMark()
    tpc.participants.outcomes = {}
    tpc.commit(stream("q", 1), [part(0, attempt=1), part(1, attempt=1)], PROGRESS)
    assert log.latest().state == DONE and ("commit", "p-0-1") in events and ("commit", "p-1-1") in events


def test_a_recovery_finishing_a_decision_whose_first_transaction_never_committed_abandons_it():
    decided = Decision("q", 4, DECIDED, (part(0), part(1)), PROGRESS)
    tpc, log, events = committer(latest=decided, outcomes={"p-0-0": [Outcome.UNKNOWN]})
    with pytest.raises(TransactionError, match="recorded abandoned"):
        tpc.recover(stream("q"))
    assert ("commit", "p-1-0") not in events and log.latest().state == ABANDONED


def test_a_first_transaction_aborted_after_it_committed_or_that_cannot_be_told_still_commits_the_rest():
    # The group holds the batch's progress: the first committed (its id moved on since).
    tpc, log, events = committer(outcomes={"p-0-0": [Outcome.UNKNOWN]}, committed_ids={"p-0-0"})
    with pytest.raises(TransactionError, match="Cannot tell whether batch 1"):
        tpc.commit(stream("q", 1), [part(0), part(1)], PROGRESS)
    assert ("commit", "p-1-0") in events and log.latest().state == DECIDED
    # Neither the coordinator nor the group can tell: nothing is guessed, as before.
    tpc, log, events = committer(outcomes={"p-0-0": [Outcome.UNKNOWN]})
    tpc.participants.unknown = True
    with pytest.raises(TransactionError, match="Cannot tell whether batch 1"):
        tpc.commit(stream("q", 1), [part(0), part(1)], PROGRESS)
    assert ("commit", "p-1-0") in events and log.latest().state == DECIDED


def test_an_operator_finishing_a_decision_whose_first_transaction_never_committed_commits_nothing_more():
    tpc, log, events = committer(outcomes={"p-0-0": [Outcome.LOST]})
    with pytest.raises(TransactionError, match="Not committing them either") as info:
        tpc.commit_decided(Decision("q", 1, DECIDED, (part(0), part(1)), PROGRESS))
    assert not info.value.retriable and ("commit", "p-1-0") not in events and not log.records


def test_an_earlier_unfinished_decision_is_finished_before_a_new_one_is_written():
    tpc, log, events = committer(latest=Decision("q", 4, DECIDED, (part(9),)))
    tpc.commit(stream("q", 5), [part(0)])
    assert events[:3] == [("commit", "p-9-0"), ("write", 4, DONE), ("write", 5, DECIDED)]


# -- the fault hook -----------------------------------------------------------

def test_faults_match_point_batch_partition_and_attempt(monkeypatch, hooked):
    monkeypatch.setenv("KAFKA_EOS_FAULT", "task-before-precommit@2#1!0:raise")
    faults.check("task-before-precommit", batch=1, partition=1, attempt=0)
    faults.check("task-before-precommit", batch=2, partition=0, attempt=0)
    faults.check("task-before-precommit", batch=2, partition=1, attempt=1)
    faults.check("driver-after-decision", batch=2)
    with pytest.raises(injection.InjectedFault):
        faults.check("task-before-precommit", batch=2, partition=1, attempt=0)


def test_faults_cost_nothing_without_a_hook(monkeypatch):
    monkeypatch.setenv("KAFKA_EOS_FAULT", "commit-raise@1")
    assert faults._hook is None
    faults.check("commit-raise", batch=1)  # the environment names this fault, yet nothing happens
    faults.install(injection.inject)       # the same call with the hook installed fires it
    try:
        with pytest.raises(injection.InjectedFault):
            faults.check("commit-raise", batch=1)
    finally:
        faults.install(None)


def test_the_hook_is_named_in_the_environment_of_spark_processes():
    env = injection.environment("driver-after-decision@1")
    assert env == {"KAFKA_EOS_FAULT": "driver-after-decision@1",
                   "KAFKA_EOS_FAULT_HOOK": "kafka_eos_tools.faults:inject"}
    assert faults._load(env["KAFKA_EOS_FAULT_HOOK"]) is injection.inject
    assert injection.environment("commit-raise:gate", gate="/tmp/g")["KAFKA_EOS_FAULT_GATE"] == "/tmp/g"


def test_a_gate_holds_the_point_until_the_test_opens_it(monkeypatch, hooked, tmp_path):
    import threading
    import time

    gate = tmp_path / "gate"
    monkeypatch.setenv("KAFKA_EOS_FAULT", "driver-after-reading-decision:gate,driver-after-reading-decision:raise")
    monkeypatch.setenv("KAFKA_EOS_FAULT_GATE", str(gate))
    passed = threading.Event()

    def at_the_point():
        with pytest.raises(injection.InjectedFault):  # the gate first, then the raise
            faults.check("driver-after-reading-decision")
        passed.set()

    worker = threading.Thread(target=at_the_point)
    worker.start()
    deadline = time.monotonic() + 10
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gate.read_text() == "driver-after-reading-decision"
    assert not passed.wait(0.3), "the point went on while the gate was closed"
    gate.unlink()
    worker.join(10)
    assert passed.is_set()


def test_a_batch_with_nothing_to_commit_records_it_done_and_fences_earlier_attempts():
    # Recorded so that a checkpoint with committed batches always has a decision in the log.
    tpc, log, events = committer()
    tpc.commit(stream("q", 1), [part(0, attempt=1, records=0), None])
    assert events == [("fence", "p-0-0"), ("write", 1, DONE)] and log.latest() == Decision("q", 1, DONE)


def test_a_lost_checkpoints_decision_that_cannot_be_told_started_fails_instead_of_abandoning():
    decided = Decision("old", 4, DECIDED, (part(0), part(1)), PROGRESS)
    tpc, log, events = committer(latest=decided, open_ids=["p-1-0"])
    tpc.participants.unknown = True
    with pytest.raises(TransactionError, match="Cannot tell whether batch 4 of query old") as info:
        tpc.recover(stream("new"))
    assert not info.value.retriable and "p-0-0 is unknown" in str(info.value)
    assert events == [] and log.latest() == decided  # nothing fenced, nothing abandoned


# -- transient errors in recovery and abort ----------------------------------

class Flaky:
    """Wraps a fake: the named calls raise a retriable error ``times`` times first."""

    def __init__(self, inner, times, names):
        self.inner, self.left = inner, {n: times for n in names}

    def __getattr__(self, name):
        call = getattr(self.inner, name)
        if name not in self.left:
            return call

        def flaky(*args):
            if self.left[name] > 0:
                self.left[name] -= 1
                raise KafkaClientError(f"{name}: COORDINATOR_LOAD_IN_PROGRESS", retriable=True)
            return call(*args)
        return flaky


def flaky_committer(latest, open_ids, times, timeout=30.0):
    tpc, log, events = committer(latest=latest, open_ids=open_ids, timeout=timeout)
    tpc.decisions = Flaky(log, times, ["latest", "write"])
    tpc.participants = tpc.progress_store = Flaky(tpc.participants, times, ["open_ids", "fence", "commit", "carry"])
    return tpc, log, events


def test_recovery_retries_transient_coordinator_errors():
    decided = Decision("q", 4, DECIDED, (part(0),))
    tpc, log, events = flaky_committer(decided, ["p-0-0", "p-1-0"], times=3)
    assert tpc.recover(stream("q")) == DoneMark("q", 4)
    assert events == [("commit", "p-0-0"), ("write", 4, DONE), ("fence", "p-1-0")]


def test_abort_retries_transient_coordinator_errors():
    tpc, log, events = flaky_committer(Decision("q", 0, DONE), ["p-1-0"], times=3)
    tpc.abort_grace_s = 0
    tpc.abort(stream("q", 1), [part(0)])
    assert events == [("fence", "p-0-0"), ("fence", "p-1-0")]


def test_recovery_gives_up_retriably_after_the_commit_budget():
    tpc, log, events = flaky_committer(None, ["p-1-0"], times=10**6, timeout=5.0)
    with pytest.raises(TransactionError, match="Could not read the sink's decisions within 5s") as info:
        tpc.recover(stream("q"))
    assert info.value.retriable and events == []


# -- a driver that fell behind ---------------------------------------------------

def test_an_older_batch_never_overwrites_a_newer_decision():
    for state in (DECIDED, DONE):
        with pytest.raises(TransactionError, match="Refusing to commit batch 4 of query q") as info:
            plan_commit(Decision("q", 5, state, (part(0),)), "q", 4, [part(1)])
        assert not info.value.retriable
    # Another query (its checkpoint lost) starts again from batch 0: not a zombie.
    assert plan_commit(Decision("old", 5, DONE), "new", 0, [part(1)]).write_decision


def test_a_zombie_driver_committing_an_older_batch_writes_and_commits_nothing():
    tpc, log, events = committer(latest=Decision("q", 5, DECIDED, (part(3),)))
    with pytest.raises(TransactionError, match="Refusing"):
        tpc.commit(stream("q", 4), [part(0)])
    assert events == [] and log.latest() == Decision("q", 5, DECIDED, (part(3),))


def test_a_new_query_whose_group_lost_its_offsets_stops_instead_of_re_reading_the_input():
    """The checkpoint is lost after the group's offsets expired: the new query's source
    would start from the earliest offsets and write the whole input again."""
    done = Decision("old", 7, DONE, (part(0),), PROGRESS)
    tpc, log, events = committer(latest=done, open_ids=["p-1-0"])
    tpc.participants.lost_offsets = True
    with pytest.raises(TransactionError, match="Query old wrote up to batch 7.*batch 7 ended there") as info:
        tpc.recover(stream("new"))
    assert not info.value.retriable and events == []
    tpc.participants.lost_offsets = False
    assert tpc.recover(stream("new")) == DoneMark("old", 7)  # the group holds them: the new query goes on


def test_an_operator_commits_a_decided_batch_and_writes_nothing_else():
    decided = Decision("q", 4, DECIDED, (part(0), part(1)), PROGRESS)
    tpc, log, events = committer(latest=decided, open_ids=["p-7-0"])
    tpc.commit_decided(decided)
    assert events == [("carry", "p-0-0", PROGRESS["offsets"]), ("commit", "p-0-0"), ("commit", "p-1-0")]
    assert log.latest() == decided  # no decision written, nothing fenced


def test_another_jobs_decision_whose_outcome_cannot_be_told_stops_one_later_job_not_every_one():
    """A batch job that died after its decision leaves it to the next job on the sink. When
    its outcome can no longer be told (its transactions expired), that job fails loudly
    once, and the decision is recorded so; the next job then goes on (as after a loss)."""
    died = WriteId(Kind.JOB, "j0", 0, job="j0")
    tpc, log, events = committer(outcomes={"p-0-0": [Outcome.UNKNOWN]})
    log.records.append((died.key, Decision("j0", 0, DECIDED, (part(0),))))
    with pytest.raises(TransactionOutcomeUnknownError, match="Cannot tell whether batch 0 of query j0"):
        tpc.commit(WriteId(Kind.JOB, "j1", 0, job="j1"), [part(1)])
    assert log.latest(died.key).state == DecisionState.UNTOLD
    tpc.commit(WriteId(Kind.JOB, "j2", 0, job="j2"), [part(2)])
    done = ("forget", WriteId(Kind.JOB, "j2", 0, job="j2").key)  # recorded done, then forgotten
    assert ("commit", "p-2-0") in events and events[-1] == done
    assert [e for e in events if e[0] == "commit"].count(("commit", "p-0-0")) == 1
