"""A stream's own sink carries its run in its participant ids (docs/dev/decisions.md, "A
stream's participant ids carry its run"): ``{prefix}:s{token(run)}-{partition}-{attempt}``,
so that the tasks of a stalled driver of an earlier run can never re-open (and so abort)
an id a newer run decided. Recovery, sweeps and the transactions tool cover every run's
family and the legacy empty one, never another writer's. The interleaving itself is the
simulation's FOUND schedule ``zombie-driver-tasks-reopen-a-newer-runs-id``."""

from __future__ import annotations

import re

import pytest

from kafka_eos_ds.kafka.coordinator import TxnState
from kafka_eos_ds.kafka_sink import transactional_ids
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.kafka_sink.participants import KafkaTransactions
from kafka_eos_ds.twophase import Kind, Participant, WriteId, WriteSpec
from kafka_eos_ds.twophase.identity import STREAM_FAMILIES, identify, matches, token

Q = "3f1c2d4e-0000-4000-8000-000000000001"
RUN1, RUN2 = "0b1c2d3e-0000-4000-8000-00000000000a", "0b1c2d3e-0000-4000-8000-00000000000b"
PREFIX = "orders-etl"


def stream_task(run, batch=4, group=False):
    """The identity a stream's task takes from Spark's local properties in run ``run``."""
    table = {"sql.streaming.queryId": Q, "streaming.sql.batchId": str(batch)}
    if group:
        table["spark.jobGroup.id"] = run
    else:
        table["spark.job.description"] = f"q\nid = {Q}\nrunId = {run}\nbatch = {batch}"
    return identify(WriteSpec(streaming=True), table.get)


def test_a_stream_task_takes_its_run_and_its_ids_carry_it():
    write = stream_task(RUN1)
    assert write == WriteId(Kind.STREAM, Q, 4, run=RUN1)
    assert stream_task(RUN1, group=True) == write  # the job group tells the run too
    assert write.family == f"s{token(RUN1)}" != stream_task(RUN2).family
    tid = transactional_ids.build(PREFIX, 2, 1, write.family)
    assert tid == f"{PREFIX}:s{token(RUN1)}-2-1"
    assert transactional_ids.parse(PREFIX, tid) == transactional_ids.TransactionalId(PREFIX, write.family, 2, 1)


def test_a_stream_task_without_its_run_keeps_the_legacy_ids():
    write = identify(WriteSpec(streaming=True), {"sql.streaming.queryId": Q, "streaming.sql.batchId": "4"}.get)
    assert write.run is None and write.family == ""
    assert transactional_ids.build(PREFIX, 2, 1, write.family) == f"{PREFIX}-2-1"


def test_the_run_changes_neither_the_decision_writer_nor_the_key_nor_what_recovery_selects():
    planned, task = WriteId(Kind.STREAM, Q, -1), stream_task(RUN1)
    assert task.key == planned.key == f"q:{Q}"
    assert task.writer == planned.writer == ""
    assert transactional_ids.decision_writer(PREFIX, task.writer) == f"{PREFIX}.decisions"
    assert task.families == planned.families == STREAM_FAMILIES


@pytest.mark.parametrize("family, selected", [
    ("", True), (f"s{token(RUN1)}", True), (f"s{token(RUN2)}", True),
    (f"f{token(Q)}{token(RUN1)}", False), (f"a{token('orders')}", False), (f"j{token('job1')}", False),
])
def test_a_streams_selector_is_its_legacy_family_and_every_run_never_another_writer(family, selected):
    tid = transactional_ids.build(PREFIX, 0, 0, family)
    assert matches(STREAM_FAMILIES, family) is selected
    assert transactional_ids.in_families(PREFIX, tid, STREAM_FAMILIES) is selected
    assert bool(re.match(transactional_ids.pattern(PREFIX, STREAM_FAMILIES), tid)) is selected
    # Another sink whose prefix starts with ours is never selected.
    assert not re.match(transactional_ids.pattern(PREFIX, STREAM_FAMILIES), f"{PREFIX}-2-{tid[len(PREFIX) + 1:]}")


def test_single_family_selectors_are_unchanged():
    job = f"j{token('job1')}"
    assert transactional_ids.pattern(PREFIX, "") == "^orders\\-etl-[0-9]+-[0-9]+$"
    assert transactional_ids.pattern(PREFIX, "j*") == "^orders\\-etl:j[0-9a-f]*-[0-9]+-[0-9]+$"
    assert matches("j*", job) and not matches("j*", "") and matches(job, job) and not matches("", job)


class Coordinator:
    """ListTransactions answered from ``states`` as a broker does: filtered by the pattern."""

    def __init__(self, states):
        self.states = states

    def list_transactions(self, pattern, open_only=True):
        return [(tid, s.producer_id, s.state) for tid, s in sorted(self.states.items())
                if re.match(pattern, tid) and (s.state == "Ongoing" or not open_only)]


def test_a_streams_recovery_lists_its_legacy_and_every_runs_ids_and_no_other_writers():
    legacy, run1, run2 = (transactional_ids.build(PREFIX, 0, 0, f) for f in
                          ("", stream_task(RUN1).family, stream_task(RUN2).family))
    others = [transactional_ids.build(PREFIX, 0, 0, f) for f in
              (f"f{token(Q)}{token(RUN1)}", f"a{token('orders')}", f"j{token('job1')}")]
    done = transactional_ids.build(PREFIX, 1, 0, stream_task(RUN2).family)
    states = {tid: TxnState(tid, "Ongoing", 1000 + n, 0, -1, 60_000)
              for n, tid in enumerate([legacy, run1, run2, *others])}
    states[done] = TxnState(done, "CompleteCommit", 2000, 0, -1, 60_000)
    participants = KafkaTransactions(Coordinator(states), PREFIX, 60_000)  # type: ignore[arg-type]
    planned = WriteId(Kind.STREAM, Q, -1)
    assert sorted(participants.open_ids(planned)) == sorted([legacy, run1, run2])
    assert sorted(participants.known_ids(planned)) == sorted([legacy, run1, run2, done])


def test_a_commit_fences_the_lower_attempts_of_its_own_run_only():
    family = stream_task(RUN1).family
    tid = transactional_ids.build(PREFIX, 3, 2, family)
    participant = Participant(tid, 3, 2, 5, KafkaHandle(1000, 0, family))
    participants = KafkaTransactions(Coordinator({}), PREFIX, 60_000)  # type: ignore[arg-type]
    assert list(participants.superseded(participant)) == [transactional_ids.build(PREFIX, 3, a, family)
                                                           for a in (0, 1)]
