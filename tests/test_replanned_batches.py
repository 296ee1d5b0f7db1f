"""A batch the sink wrote, planned again by Spark with other offsets (the offset log
rewritten, an older checkpoint restored): refused loudly, never taken for written."""

from __future__ import annotations

import pytest

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.twophase import DECIDED, DONE, Decision
from kafka_eos_ds.twophase.recovery import check_checkpoint, plan_commit
from tests.test_twophase import committer, part, stream

WRITTEN = {"in": {"0": 50, "1": 40}}
SMALLER = {"in": {"0": 30, "1": 40}}   # offsets/3 rewritten, e.g. with a smaller maxOffsetsPerTrigger


def with_offsets(state, offsets=WRITTEN, group=None):
    progress = {"offsets": offsets} if group is None else {"group": group, "offsets": offsets}
    return Decision("q", 3, state, (part(0),), progress)


@pytest.mark.parametrize("state", [DONE, DECIDED])
def test_a_written_batch_committed_again_with_other_offsets_is_refused(state):
    """Batch 3 is done in the sink but not in Spark's commit log; the operator deleted
    offsets/3 and Spark planned a smaller batch 3. Its tasks drained their input (the
    done mark); taking the batch for written loses [30, 50) of partition 0."""
    with pytest.raises(TransactionError, match="offsets/3") as info:
        plan_commit(with_offsets(state), "q", 3, [part(1)], {"offsets": SMALLER})
    assert not info.value.retriable
    assert "{'0': 50, '1': 40}" in str(info.value) and "{'0': 30, '1': 40}" in str(info.value)


def test_the_same_batch_with_the_same_offsets_is_still_a_re_run():
    assert plan_commit(with_offsets(DONE, group="g"), "q", 3, [part(1)], {"group": "g", "offsets": WRITTEN}).noop
    decided = with_offsets(DECIDED)
    plan = plan_commit(decided, "q", 3, [part(1)], {"offsets": {"in": {"1": 40, "0": 50}}})
    assert plan.decision == decided and not plan.write_decision
    assert plan_commit(Decision("q", 3, DONE), "q", 3, [part(1)], {"offsets": SMALLER}).noop  # nothing recorded


def test_the_committer_refuses_it_before_committing_anything():
    tpc, log, events = committer(latest=with_offsets(DONE, group="g"))
    with pytest.raises(TransactionError, match="offsets/3"):
        tpc.commit(stream("q", 3), [part(1)], {"group": "g", "offsets": SMALLER})
    assert events == []


class Offsets:
    """The checkpoint's offset log as the planner reads it: which batches it holds."""

    def __init__(self, batches):
        self.batches, self.read = batches, []

    def latest(self):
        self.read.append("list")
        return max(self.batches, default=-1)

    def of(self, batch):
        self.read.append(batch)
        return self.batches[batch]


def test_the_planner_refuses_a_rewritten_offset_log_before_the_tasks():
    with pytest.raises(TransactionError, match="offsets/3"):
        offsets = Offsets({2: {}, 3: SMALLER})
        check_checkpoint(with_offsets(DONE), 2, offsets.latest, offsets.of)
    offsets = Offsets({2: {}, 3: WRITTEN})
    check_checkpoint(with_offsets(DONE), 2, offsets.latest, offsets.of)  # Spark runs batch 3 again, as written


def test_the_planner_refuses_a_checkpoint_older_than_the_sink_whatever_the_decision_records():
    """An older checkpoint restored: Spark plans batch 1 again, batches 1..3 are decided."""
    offsets = Offsets({0: {}, 1: SMALLER})
    with pytest.raises(TransactionError, match="offset log ends at batch 1") as info:
        check_checkpoint(Decision("q", 3, DONE, (part(0),)), 0, offsets.latest, offsets.of)
    assert not info.value.retriable


def test_the_planner_reads_nothing_more_while_the_commit_log_is_at_the_latest_decision():
    """The steady state (batch 3 in Spark's commit log, batch 4 planned) costs no read."""
    offsets = Offsets({3: WRITTEN, 4: SMALLER})
    check_checkpoint(with_offsets(DONE), 3, offsets.latest, offsets.of)
    check_checkpoint(None, -1, offsets.latest, offsets.of)
    assert offsets.read == []


def test_the_kafka_sinks_planner_compares_its_latest_decision_with_the_checkpoint():
    from types import SimpleNamespace

    from kafka_eos_ds.kafka_sink.sink import KafkaSink

    class Checkpoint:
        location = "/ckpt"

        def __init__(self, offsets):
            self.offsets = offsets

        def latest_batch(self, log="offsets"):
            return {"commits": 2, "offsets": 3}[log]

        def end_offsets(self, batch):
            return self.offsets

    decided = with_offsets(DONE, group="g")
    committer = SimpleNamespace(decisions=SimpleNamespace(latest=lambda key: decided))
    sink = KafkaSink(config=SimpleNamespace(commit_timeout_s=1.0))  # type: ignore[arg-type]
    with pytest.raises(TransactionError, match="offsets/3"):
        sink._require_decisions(committer, stream("q"), Checkpoint(SMALLER))
    sink._require_decisions(committer, stream("q"), Checkpoint(WRITTEN))
