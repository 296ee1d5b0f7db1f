"""What the planner refuses or checks before any task writes: no broker, no Spark."""

from __future__ import annotations

import pytest

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.twophase import ABANDONED, DECIDED, DONE, Decision, DoneMark, Kind, WriteId
from kafka_eos_ds.twophase.recovery import plan_write
from tests.test_twophase import committer, part, stream

APP = WriteId(Kind.APP, "orders", 0, job="job1")


# -- txnAppId/txnVersion below the app's latest -------------------------------------

@pytest.mark.parametrize("state", [DONE, DECIDED])
def test_an_app_version_below_the_latest_is_refused_naming_txnappid(state):
    """``txnVersion=batch_id`` after a checkpoint reset: batch ids start at 0 again, below
    the app's latest version. Skipping them (as a re-run of a written version) would drop
    every new micro-batch's rows until the ids catch up, silently."""
    with pytest.raises(TransactionError, match="txnAppId 'orders'.*txnVersion 0.*new 'txnAppId'") as info:
        plan_write(Decision("orders", 5000, state, (part(0),)), APP, [part(1)])
    assert not info.value.retriable


def test_the_planner_refuses_an_app_version_below_the_latest_before_any_task_writes():
    tpc, log, events = committer(open_ids=["p-0-0"])
    log.records.append((APP.key, Decision("orders", 5000, DONE, (part(0),))))
    with pytest.raises(TransactionError, match="txnAppId 'orders'") as info:
        tpc.recover(APP)
    assert not info.value.retriable and events == []


def test_the_latest_app_version_run_again_still_adds_nothing():
    tpc, log, events = committer()
    log.records.append((APP.key, Decision("orders", 5000, DONE, (part(0),))))
    again = WriteId(Kind.APP, "orders", 5000, job="job2")
    assert tpc.recover(again) == DoneMark("orders", 5000)
    plan = plan_write(log.latest(APP.key), again, [part(1)])
    assert plan.skip and not plan.write_decision


# -- a new query after a lost checkpoint: the expired-group check ---------------------

PROGRESS = {"group": "g", "offsets": {"in": {"0": 50, "1": 40}}}


def test_a_new_query_after_an_abandoned_batch_stops_when_the_group_lost_its_offsets():
    """The old query's last batch was abandoned (its first transaction aborted after the
    decision), its checkpoint lost, the group's offsets expired meanwhile: reading from the
    group, the new query would start at the earliest offsets and write batches 0..6 again."""
    abandoned = Decision("old", 7, ABANDONED, (part(0),), PROGRESS)
    tpc, log, events = committer(latest=abandoned, open_ids=["p-1-0"])
    tpc.participants.lost_offsets = True
    with pytest.raises(TransactionError, match="Query old wrote up to batch 6 .*Batch 7 was abandoned") as info:
        tpc.recover(stream("new"))
    assert not info.value.retriable and events == []
    tpc.participants.lost_offsets = False
    assert tpc.recover(stream("new")) == DoneMark()  # the group holds them: the new query goes on


def test_an_abandoned_first_batch_leaves_nothing_for_the_group_to_remember():
    """Batch 0 abandoned: nothing of the old query is in the output, and a group without
    offsets is where the new query must start."""
    abandoned = Decision("old", 0, ABANDONED, (part(0),), PROGRESS)
    tpc, log, events = committer(latest=abandoned)
    tpc.participants.lost_offsets = True
    assert tpc.recover(stream("new")) == DoneMark()
