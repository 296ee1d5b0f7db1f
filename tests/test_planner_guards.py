"""What the planner refuses or checks before any task writes: no broker, no Spark."""

from __future__ import annotations

import pytest

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.twophase import DECIDED, DONE, Decision, DoneMark, Kind, WriteId
from kafka_eos_ds.twophase.recovery import plan_write
from tests.test_twophase import committer, part

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

