"""Defects planted on purpose (with pytest's monkeypatch) to prove the invariants see them."""

from __future__ import annotations

from typing import Any

from kafka_eos_ds.twophase.protocol import DECIDED


def undurable_decisions(monkeypatch: Any) -> None:
    """A decision log whose 'decided' records never reach the log: the commits that follow
    have no durable decision behind them."""
    from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog

    write = KafkaDecisionLog.write

    def write_done_only(self: Any, key: str, decision: Any) -> None:
        if decision.state != DECIDED:
            write(self, key, decision)

    monkeypatch.setattr(KafkaDecisionLog, "write", write_done_only)


def forgetful_log(monkeypatch: Any) -> None:
    """A decision log that reads nothing back: a restart decides a decided batch anew."""
    from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog

    monkeypatch.setattr(KafkaDecisionLog, "latest", lambda self, key: None)
    monkeypatch.setattr(KafkaDecisionLog, "latest_of", lambda self, kind: None)
    monkeypatch.setattr(KafkaDecisionLog, "unfinished", lambda self, kind: [])


def sweepless_committer(monkeypatch: Any) -> None:
    """A committer that fences nothing (no recovery abort, no post-commit sweep)."""
    from kafka_eos_ds.twophase.steps import Steps

    monkeypatch.setattr(Steps, "fence", lambda self, ids: None)


def claimless_file_fences(monkeypatch: Any) -> None:
    """The file sink's fences delete what they listed without claiming the decision log
    first: a driver that fell behind deletes what a newer driver decided."""
    from kafka_eos_ds.table_sink.decision_log import FileDecisionLog

    monkeypatch.setattr(FileDecisionLog, "claim", lambda self, writer, ticket: None)
