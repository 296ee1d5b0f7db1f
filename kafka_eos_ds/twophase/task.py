"""The executor's half of the two-phase commit: write, pre-commit, or abort; the same
for every sink."""

from __future__ import annotations

from typing import Any, Iterable

from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.protocol import DoneMark, TaskTransaction
from kafka_eos_ds.twophase.spark import TaskIdentity


def already_decided(mark: DoneMark, task: TaskIdentity, items: Iterable[Any]) -> bool:
    """True (having drained ``items``) when the task's batch was decided before a restart:
    its output is already there, and the task must write nothing."""
    if not mark.covers(task.query, task.batch):
        return False
    for _ in items:
        pass
    return True


def run_task(txn: TaskTransaction, items: Iterable[Any], task: TaskIdentity) -> int:
    """Write ``items``, pre-commit if anything was written; abort on any failure.

    Returns the number of records written (0: nothing to commit, nothing opened).
    """
    where = {"batch": task.batch, "partition": task.partition, "attempt": task.attempt}
    try:
        records = txn.write_all(items)
        faults.check("task-before-precommit", **where)
        if records:
            txn.pre_commit()
    except BaseException:
        txn.abort()
        raise
    faults.check("task-after-precommit", **where)
    return records
