"""The Kafka models answer as Kafka does (the rules and their sources: model/coordinator.py)."""

from __future__ import annotations

import pytest

from tests.simulation.model import errors as e
from tests.simulation.model.cluster import Cluster
from tests.simulation.model.coordinator import TxnState

T = 60_000


def open_txn(cluster, tid, rows=("a",), partition=0, topic="out"):
    code, pid, epoch = cluster.coordinator.init_producer_id(tid, T)
    assert code == e.NONE
    assert cluster.coordinator.add_partitions(tid, pid, epoch, [(topic, partition)]) == e.NONE
    for row in rows:
        assert cluster.produce(tid, pid, epoch, topic, partition, None, row) == e.NONE
    return pid, epoch


def visible(cluster, topic="out", partition=0):
    return [r.value for r in cluster.log(topic, partition).read_committed()]


@pytest.fixture
def cluster():
    c = Cluster()
    c.create_topic("out", 2)
    return c


def test_init_producer_id_starts_at_epoch_0_and_bumps_by_one_when_nothing_is_open(cluster):
    tc = cluster.coordinator
    code, pid, epoch = tc.init_producer_id("t", T)
    assert (code, epoch) == (e.NONE, 0)
    assert tc.init_producer_id("t", T) == (e.NONE, pid, 1)


def test_fencing_an_ongoing_transaction_aborts_it_and_costs_two_epochs(cluster):
    tc = cluster.coordinator
    pid, epoch = open_txn(cluster, "t")
    assert tc.init_producer_id("t", T) == (e.CONCURRENT_TRANSACTIONS, -1, -1)
    assert tc.describe("t").state == TxnState.PREPARE_ABORT and tc.describe("t").epoch == epoch + 1
    assert tc.init_producer_id("t", T)[0] == e.CONCURRENT_TRANSACTIONS  # markers not written yet
    cluster.settle()
    assert tc.describe("t").state == TxnState.COMPLETE_ABORT
    assert tc.init_producer_id("t", T) == (e.NONE, pid, epoch + 2)
    # The fenced producer can neither commit nor append any more.
    assert tc.end_txn("t", pid, epoch, commit=True) == e.PRODUCER_FENCED
    assert cluster.log("out", 0).append(None, "late", pid, epoch, transactional=True) == e.INVALID_PRODUCER_EPOCH
    assert cluster.produce("t", pid, epoch, "out", 0, None, "late") == e.PRODUCER_FENCED
    assert visible(cluster) == []


def test_end_txn_answers_before_the_markers_and_repeats_are_idempotent(cluster):
    tc = cluster.coordinator
    pid, epoch = open_txn(cluster, "t", rows=("a", "b"))
    assert tc.end_txn("t", pid, epoch, commit=True) == e.NONE
    assert tc.describe("t").state == TxnState.PREPARE_COMMIT
    assert visible(cluster) == []  # committed, not yet visible: the marker is still on its way
    assert tc.end_txn("t", pid, epoch, commit=True) == e.CONCURRENT_TRANSACTIONS
    assert tc.end_txn("t", pid, epoch, commit=False) == e.INVALID_TXN_STATE
    cluster.settle()
    assert visible(cluster) == ["a", "b"]
    assert tc.end_txn("t", pid, epoch, commit=True) == e.NONE  # v1: a re-commit answers NONE
    assert tc.end_txn("t", pid, epoch, commit=False) == e.INVALID_TXN_STATE


def test_end_txn_checks_producer_id_epoch_and_state(cluster):
    tc = cluster.coordinator
    assert tc.end_txn("nobody", 1, 0, commit=True) == e.INVALID_PRODUCER_ID_MAPPING
    code, pid, epoch = tc.init_producer_id("t", T)
    assert tc.end_txn("t", pid, epoch, commit=True) == e.INVALID_TXN_STATE  # Empty: nothing to commit
    assert tc.end_txn("t", pid + 1, epoch, commit=True) == e.INVALID_PRODUCER_ID_MAPPING
    assert tc.end_txn("t", pid, epoch + 1, commit=True) == e.PRODUCER_FENCED  # v1: higher is fenced too
    assert tc.end_txn("t", pid, epoch - 1, commit=True) == e.PRODUCER_FENCED


def test_the_broker_aborts_a_timed_out_transaction_on_its_sweep_and_bumps_the_epoch(cluster):
    import random

    tc = cluster.coordinator
    pid, epoch = open_txn(cluster, "t")
    cluster.clock.advance(T + 1)
    assert tc.describe("t").state == TxnState.ONGOING  # not before the sweep
    cluster.clock.advance(cluster.abort_interval_ms)
    cluster.tick(random.Random(0))
    cluster.settle()
    view = tc.describe("t")
    assert (view.state, view.epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    assert tc.end_txn("t", pid, epoch, commit=True) == e.PRODUCER_FENCED
    assert cluster.log("out", 0).last_stable_offset() == cluster.log("out", 0).high_watermark()


def test_an_exhausted_epoch_rotates_the_producer_id():
    # Exhausted means epoch >= limit - 1 (Kafka: Short.MaxValue - 1); limit 4 here.
    cluster = Cluster(epoch_limit=4)
    tc = cluster.coordinator
    _code, pid, _epoch = tc.init_producer_id("t", T)
    assert [tc.init_producer_id("t", T)[1:] for _ in range(3)] == [(pid, 1), (pid, 2), (pid, 3)]
    code, new_pid, epoch = tc.init_producer_id("t", T)
    assert (code, epoch) == (e.NONE, 0) and new_pid != pid


def test_an_open_transaction_holds_read_committed_at_the_lso_and_aborted_records_are_skipped(cluster):
    tc = cluster.coordinator
    pid_a, ep_a = open_txn(cluster, "a", rows=("a1",))
    pid_b, ep_b = open_txn(cluster, "b", rows=("b1",))
    pid_c, ep_c = open_txn(cluster, "c", rows=("c1",))
    cluster.produce("a", pid_a, ep_a, "out", 0, None, "a2")
    log = cluster.log("out", 0)
    assert tc.end_txn("b", pid_b, ep_b, commit=True) == e.NONE
    assert tc.end_txn("c", pid_c, ep_c, commit=False) == e.NONE
    cluster.settle()
    assert log.last_stable_offset() == 0 and visible(cluster) == []  # "a" still open at offset 0
    assert tc.end_txn("a", pid_a, ep_a, commit=True) == e.NONE
    cluster.settle()
    assert visible(cluster) == ["a1", "b1", "a2"]
    assert log.last_stable_offset() == log.high_watermark()


def test_list_and_describe_transactions(cluster):
    tc = cluster.coordinator
    open_txn(cluster, "s-0-0")
    open_txn(cluster, "s-1-0")
    tc.init_producer_id("s.decisions", T)
    listed = tc.list_transactions([TxnState.ONGOING], r"^s-[0-9]+-[0-9]+$")
    assert [tid for tid, _pid, _state in listed] == ["s-0-0", "s-1-0"]
    assert tc.describe("unknown") is None
    assert tc.describe("s-0-0").partitions == (("out", 0),)


def test_idle_ids_expire():
    import random

    tc = Cluster(id_expiration_ms=1000, expire_interval_ms=500)
    tc.coordinator.init_producer_id("t", T)
    tc.clock.advance(1500)
    tc.tick(random.Random(0))
    assert tc.coordinator.describe("t") is None


def test_txn_offset_commit_becomes_the_groups_offsets_only_when_its_transaction_commits(cluster):
    tc = cluster.coordinator
    for commit in (False, True):
        pid, epoch = open_txn(cluster, "t")
        assert tc.add_partitions("t", pid, epoch, [("__consumer_offsets", "g")]) == e.NONE
        assert cluster.txn_offset_commit("t", pid, epoch, "g", {("in", 0): 5}) == e.NONE
        assert cluster.groups.offsets("g") == {} and not cluster.groups.stable("g")
        assert tc.end_txn("t", pid, epoch, commit=commit) == e.NONE
        assert not cluster.groups.stable("g")  # still pending until the marker lands
        cluster.settle()
        assert cluster.groups.offsets("g") == ({("in", 0): 5} if commit else {}) and cluster.groups.stable("g")


def test_a_timeout_above_the_brokers_maximum_is_refused(cluster):
    assert cluster.coordinator.init_producer_id("t", 900_001)[0] == e.INVALID_TRANSACTION_TIMEOUT
