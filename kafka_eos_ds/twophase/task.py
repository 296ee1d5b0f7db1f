"""The executor's half of the two-phase commit: write, pre-commit, or abort; the same
for every sink."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.protocol import DoneMark, TaskTransaction

if TYPE_CHECKING:
    from kafka_eos_ds.twophase.writers import Task


def already_decided(mark: DoneMark, task: "Task", items: Iterable[Any]) -> bool:
    """True (having drained ``items``) when the task's write was decided before a restart:
    its output is already there, and the task must write nothing."""
    if not mark.covers(task.write.app, task.write.version):
        return False
    for _ in items:
        pass
    return True


def run_task(txn: TaskTransaction, items: Iterable[Any], task: "Task") -> int:
    """Write ``items``, pre-commit if anything was written; abort on any failure.

    Returns the number of records written (0: nothing to commit, nothing opened).
    """
    where = {"batch": task.write.version, "partition": task.partition, "attempt": task.attempt}
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
