"""A decision's progress is attached before the decision: recovery does not attach it again
(the open schedule zombie-recovery-carry), except for records written before the mark."""

from __future__ import annotations

from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.twophase import DECIDED, Decision, DoneMark
from tests.test_twophase import PROGRESS, committer, part, stream


def test_the_mark_round_trips_and_a_record_without_it_reads_as_legacy():
    marked = Decision("q", 3, DECIDED, (part(0),), PROGRESS, progress_attached=True)
    assert marked.to_json()["progressAttached"] is True
    assert Decision.from_json(marked.to_json(), KafkaHandle.from_json) == marked
    legacy = marked.to_json()
    del legacy["progressAttached"]
    assert not Decision.from_json(legacy, KafkaHandle.from_json).progress_attached
    assert "progressAttached" not in Decision("q", 3, DECIDED, (part(0),)).to_json()  # no progress: no mark


def test_a_new_decision_is_marked_as_carrying_its_progress():
    tpc, log, events = committer()
    tpc.commit(stream("q", 1), [part(0), part(1)], PROGRESS)
    decided = [d for _k, d in log.records if d.state == DECIDED]
    assert events[:2] == [("carry", "p-0-0", PROGRESS["offsets"]), ("write", 1, DECIDED)]
    assert decided and all(d.progress_attached for d in decided)


def test_recovery_finishing_a_marked_decision_does_not_attach_its_progress_again():
    """Re-attaching would describe the first transaction, and a driver stalled between that
    and AddOffsetsToTxn could, back after a newer driver committed the batch, open a new
    transaction under the still-current epoch and move the group's offsets back."""
    decided = Decision("q", 4, DECIDED, (part(0), part(1)), PROGRESS, progress_attached=True)
    tpc, log, events = committer(latest=decided)
    assert tpc.recover(stream("q")) == DoneMark("q", 4)
    assert [e for e in events if e[0] == "carry"] == []
    assert events[:2] == [("commit", "p-0-0"), ("commit", "p-1-0")]


def test_an_operator_finishing_a_marked_decision_does_not_attach_its_progress_again():
    decided = Decision("q", 4, DECIDED, (part(0), part(1)), PROGRESS, progress_attached=True)
    tpc, log, events = committer(latest=decided)
    tpc.commit_decided(decided)
    assert events == [("commit", "p-0-0"), ("commit", "p-1-0")]
