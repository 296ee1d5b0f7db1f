"""Fences validate, then abort exact transactions (docs/dev/decisions.md, "Fences validate,
then abort exact transactions"): a driver step observes the exact transactions open under
the ids it fences, claims its decision writer, and only then aborts those transactions, by
EndTxn(abort) at their producer id and epoch. The interleavings themselves are the
simulation's directed ``zombie-driver-recovery`` and ``zombie-driver-sweep``."""

from __future__ import annotations

import pytest

from kafka_eos_ds.errors import KafkaClientError
from kafka_eos_ds.kafka import coordinator as c
from kafka_eos_ds.kafka.coordinator import TxnState
from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.kafka_sink.participants import KafkaFences, KafkaTransactions
from kafka_eos_ds.twophase import DECIDED, DONE, Decision, Instance, Kind, Participant, TwoPhaseCommitter, WriteId

QUERY = WriteId(Kind.STREAM, "q", -1)


class Coordinator:
    """The coordinator calls the sink's steps make, answered from ``states`` (id -> TxnState)."""

    def __init__(self, states=None, end_codes=None):
        self.states = dict(states or {})
        self.end_codes = dict(end_codes or {})  # id -> [codes] answered to EndTxn, in turn
        self.calls: list = []

    def list_transactions(self, pattern, open_only=True):
        return [(tid, s.producer_id, s.state) for tid, s in sorted(self.states.items())]

    def describe_many(self, ids):
        self.calls.append(("describe", tuple(ids)))
        return {tid: self.states.get(tid) for tid in ids}

    def end_txn(self, tid, pid, epoch, commit):
        self.calls.append(("end_txn", tid, pid, epoch, commit))
        codes = self.end_codes.get(tid, [c.NONE])
        return codes.pop(0) if len(codes) > 1 else codes[0]

    def fence(self, tid, timeout_ms):
        self.calls.append(("fence", tid))


def ongoing(tid, pid, epoch):
    return TxnState(tid, "Ongoing", pid, epoch, -1, 60_000)  # no start time: the timeout margin is not checked


class Log:
    """A decision log whose writer a newer step may have taken over (``taken_over``)."""

    def __init__(self, latest=None, events=None):
        self.records = [("q:q", latest)] if latest else []
        self.events = events if events is not None else []
        self.taken_over = False

    def latest(self, key):
        found = [d for k, d in self.records if k == key]
        return found[-1] if found else None

    def latest_of(self, kind):
        found = [d for k, d in self.records if k.startswith(kind + ":")]
        return found[-1] if found else None

    def unfinished(self, kind):
        return []

    def write(self, key, decision):
        self.records.append((key, decision))

    def forget(self, key):
        pass

    def claim(self):
        self.events.append(("claim",))
        if self.taken_over:
            raise KafkaClientError("Writing the commit decision failed: fenced by a newer producer", retriable=False)


def committer(coordinator, log):
    txns = KafkaTransactions(coordinator, "p", 60_000)
    return TwoPhaseCommitter(log, txns, progress_store=txns, fences=KafkaFences(txns, log),  # type: ignore[arg-type]
                             commit_timeout_s=5, parallelism=1, abort_grace_s=0, sleep=lambda s: None)


def test_a_recovery_aborts_the_transactions_it_observed_at_their_exact_epoch_after_its_claim():
    events: list = []
    coordinator = Coordinator({"p-0-0": ongoing("p-0-0", 7, 3), "p-1-0": ongoing("p-1-0", 8, 5)})
    coordinator.calls = events
    committer(coordinator, Log(events=events)).recover(QUERY)
    assert events == [("describe", ("p-0-0", "p-1-0")), ("claim",),
                      ("end_txn", "p-0-0", 7, 3, False), ("end_txn", "p-1-0", 8, 5, False)]


def test_a_zombie_recovery_whose_writer_was_taken_over_aborts_nothing():
    """The zombie-driver-recovery interleaving on fakes: the step read the log (batch 0
    done), stalled, and meanwhile a newer driver fenced the decision writer and decided
    batch 1, whose transactions are open. Before: InitProducerId on both ids, batch 1
    lost. Now: the claim fails, nothing is aborted, the step stops."""
    coordinator = Coordinator({"p-0-0": ongoing("p-0-0", 7, 4), "p-1-0": ongoing("p-1-0", 8, 6)})
    log = Log(Decision("q", 0, DONE))
    log.taken_over = True
    with pytest.raises(KafkaClientError, match="fenced"):
        committer(coordinator, log).recover(QUERY)
    assert [call for call in coordinator.calls if call[0] != "describe"] == []


def test_a_zombie_post_commit_sweep_whose_writer_was_taken_over_aborts_nothing():
    coordinator = Coordinator({"p-0-0": ongoing("p-0-0", 7, 3)})
    log = Log()
    tpc = committer(coordinator, log)
    first = Participant("p-0-0", 0, 0, 5, KafkaHandle(7, 3))
    # Batch 0's commit: its transaction commits; then the driver stalls, a newer one takes
    # the writer over and opens batch 1's transaction on the same id, under a new epoch.
    coordinator.end_txn = lambda *a, **kw: (coordinator.states.update({"p-0-0": ongoing("p-0-0", 7, 4)}),
                                            setattr(log, "taken_over", True), c.NONE)[-1]
    with pytest.raises(KafkaClientError, match="fenced"):
        tpc.commit(WriteId(Kind.STREAM, "q", 0), [first])
    assert [call for call in coordinator.calls if call[0] in ("fence", "end_txn")] == []  # batch 1's is left open
    assert log.latest("q:q").state == DECIDED  # and this step records nothing more


@pytest.mark.parametrize(("code", "aborted"), [(c.NONE, True), (c.PRODUCER_FENCED, False),
                                               (c.INVALID_PRODUCER_EPOCH, False), (c.INVALID_TXN_STATE, False),
                                               (c.INVALID_PRODUCER_ID_MAPPING, False)])
def test_an_exact_abort_is_endtxn_at_the_observed_epoch_and_leaves_what_moved_on(code, aborted):
    """PRODUCER_FENCED: the id was initialised again since (a newer batch's transaction);
    INVALID_TXN_STATE: committed since. Neither is this step's to abort, nor an error."""
    coordinator = Coordinator(end_codes={"p-0-0": [code]})
    txns = KafkaTransactions(coordinator, "p", 60_000)
    assert txns.abort_exact(Instance("p-0-0", "7/3")) is aborted
    assert coordinator.calls == [("end_txn", "p-0-0", 7, 3, False)]


def test_a_commit_still_being_written_is_retried_not_taken_for_an_abort():
    """The coordinator still shows Ongoing while a PrepareCommit is being appended; the exact
    abort then answers CONCURRENT_TRANSACTIONS (retried), and INVALID_TXN_STATE once the
    commit completed: never reported aborted."""
    coordinator = Coordinator(end_codes={"p-0-0": [c.CONCURRENT_TRANSACTIONS, c.INVALID_TXN_STATE]})
    txns = KafkaTransactions(coordinator, "p", 60_000)
    with pytest.raises(KafkaClientError) as busy:
        txns.abort_exact(Instance("p-0-0", "7/3"))
    assert busy.value.retriable
    assert txns.abort_exact(Instance("p-0-0", "7/3")) is False
    with pytest.raises(KafkaClientError) as denied:
        KafkaTransactions(Coordinator(end_codes={"p-0-0": [c.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]}), "p",
                          60_000).abort_exact(Instance("p-0-0", "7/3"))
    assert not denied.value.retriable


def test_observe_names_only_ongoing_transactions_with_their_producer_id_and_epoch():
    coordinator = Coordinator({"p-0-0": ongoing("p-0-0", 7, 3),
                               "p-1-0": TxnState("p-1-0", "PrepareCommit", 8, 2),
                               "p-2-0": TxnState("p-2-0", "Empty", 9, 1)})
    found = KafkaTransactions(coordinator, "p", 60_000).observe(["p-0-0", "p-1-0", "p-2-0", "p-3-0"])
    assert found == [Instance("p-0-0", "7/3")]


class Producer:
    def __init__(self, log, fenced=False):
        self.log, self.fenced = log, fenced

    def list_topics(self, *a, **kw):
        pass

    def init_transactions(self, timeout):
        self.log.append("init")

    def begin_transaction(self):
        pass

    def produce(self, topic, value=None, key=None, partition=None):
        self.log.append((key, value))

    def commit_transaction(self, timeout):
        if self.fenced:
            from confluent_kafka import KafkaError, KafkaException

            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
        self.log.append("commit")


class Clients:
    def __init__(self):
        self.log: list = []
        self.made: list = []

    def producer(self, conf):
        self.made.append(Producer(self.log))
        return self.made[-1]


def decision_log(clients):
    log = KafkaDecisionLog({"bootstrap.servers": "b:9092"}, "_log", "p", "", clients=clients)
    log._partitions, log._partition = 1, 0  # the topic and the prefix's partition, known
    return log


def test_a_claim_commits_a_tombstone_with_the_steps_first_writer_and_fails_once_it_is_fenced():
    clients = Clients()
    log = decision_log(clients)
    log.fence_writers()
    log.claim()
    assert clients.log == ["init", (b"p|fence:", None), "commit"]
    clients.made[0].fenced = True  # a newer step ran init_transactions on the writer
    with pytest.raises(KafkaClientError):
        log.claim()
    # The failed write dropped the producer: a later claim of this step does not start a
    # new one (which would fence the newer step without this one reading the log again).
    with pytest.raises(KafkaClientError, match="aborts nothing"):
        log.claim()
    assert len(clients.made) == 1


def test_a_claim_after_the_step_replaced_its_writer_fails():
    clients = Clients()
    log = decision_log(clients)
    log.fence_writers()
    log._producer = None  # a decision write failed retriably: its retry starts a new producer
    log.write("q:q", Decision("q", 1, DECIDED))
    assert len(clients.made) == 2
    with pytest.raises(KafkaClientError, match="aborts nothing"):
        log.claim()
