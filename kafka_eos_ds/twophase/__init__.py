"""A sink-agnostic two-phase-commit protocol (no Kafka in here).

:mod:`.protocol` names the parts (Participant, Decision, DoneMark, the DecisionLog and
Participants ports), :mod:`.recovery` is the pure policy, :mod:`.committer` runs it on
the driver, :mod:`.faults` injects crashes for tests. The Kafka sink
(:mod:`kafka_eos_ds.sink`) is one implementation.
"""

from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.protocol import (
    ABANDONED,
    DECIDED,
    DONE,
    Decision,
    DecisionLog,
    DoneMark,
    Outcome,
    Participant,
    Participants,
    ProgressCarrier,
    TaskTransaction,
)
from kafka_eos_ds.twophase.recovery import RecoveryContext, RecoveryPlan, plan_abort, plan_commit, plan_recovery

__all__ = [
    "ABANDONED", "DECIDED", "DONE", "Decision", "DecisionLog", "DoneMark", "Outcome", "Participant", "Participants",
    "ProgressCarrier", "TaskTransaction", "TwoPhaseCommitter", "RecoveryContext", "RecoveryPlan", "plan_abort", "plan_commit",
    "plan_recovery",
]
