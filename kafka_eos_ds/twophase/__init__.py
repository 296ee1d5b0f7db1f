"""A sink-agnostic two-phase-commit protocol (no Kafka in here).

:mod:`.protocol` names the parts (Participant, Decision, DoneMark), generic over the
sink's typed Handle, and the ports a sink implements; :mod:`.identity` says which write a
task belongs to; :mod:`.recovery` is the pure policy; :mod:`.committer` runs it on the
driver (by role: :mod:`.committing`, :mod:`.recovering`, :mod:`.aborting`, over
:mod:`.steps` and :mod:`.ports`); :mod:`.task` runs a task's side; :mod:`.writers` are
Spark's writers, composed with a sink's steps; :mod:`.faults` is the crash-test hook. The
Kafka sink (:mod:`kafka_eos_ds.kafka_sink`) and the file sink (:mod:`kafka_eos_ds.table_sink`)
implement it.
"""

from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.identity import Kind, WriteId, WriteSpec
from kafka_eos_ds.twophase.protocol import (
    ABANDONED,
    DECIDED,
    DONE,
    CommitMessage,
    Decision,
    DecisionLog,
    DecisionState,
    DoneMark,
    Fences,
    Handle,
    Instance,
    Outcome,
    Participant,
    Participants,
    ProgressStore,
    TaskTransaction,
)
from kafka_eos_ds.twophase.recovery import RecoveryContext, RecoveryPlan, plan_abort, plan_commit, plan_recovery

__all__ = [
    "ABANDONED", "DECIDED", "DONE", "CommitMessage", "Decision", "DecisionLog", "DecisionState", "DoneMark",
    "Fences", "Handle", "Instance", "Kind", "Outcome", "Participant", "Participants", "ProgressStore",
    "TaskTransaction", "TwoPhaseCommitter",
    "RecoveryContext", "RecoveryPlan", "WriteId", "WriteSpec", "plan_abort", "plan_commit", "plan_recovery",
]
