"""Which write a task belongs to, and how each kind of write commits: no broker, no Spark."""

from __future__ import annotations

import json

import pytest

from kafka_eos_ds.errors import ConfigError, TransactionError
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.twophase import DECIDED, DONE, Decision, DoneMark, Kind, Participant, WriteId, WriteSpec
from kafka_eos_ds.twophase.identity import identify, matches
from kafka_eos_ds.twophase.protocol import DecisionState
from kafka_eos_ds.twophase.recovery import plan_write, stream_target
from tests.test_twophase import committer

Q, RUN1, RUN2 = "3f1c2d4e-0000-4000-8000-000000000001", "0b1c2d3e-0000-4000-8000-00000000000a", \
    "0b1c2d3e-0000-4000-8000-00000000000b"


def props(**values):
    names = {"query": "sql.streaming.queryId", "batch": "streaming.sql.batchId", "description": "spark.job.description",
             "group": "spark.jobGroup.id"}
    table = {names[k]: v for k, v in values.items()}
    return table.get


def described(run, batch=3):
    return f"\nid = {Q}\nrunId = {run}\nbatch = {batch}"


# -- identity ------------------------------------------------------------------------

def test_a_stream_writer_task_is_its_query_and_micro_batch():
    assert identify(WriteSpec(streaming=True), props(query=Q, batch="7", description=described(RUN1, 7))) == \
        WriteId(Kind.STREAM, Q, 7, run=RUN1)
    # Without the run (legacy ids: tests/test_stream_run_ids.py).
    assert identify(WriteSpec(streaming=True), props(query=Q, batch="7")) == WriteId(Kind.STREAM, Q, 7)


def test_a_df_write_inside_foreachbatch_is_the_streams_micro_batch_in_this_run():
    spec = WriteSpec(streaming=False, job="job1")
    write = identify(spec, props(query=Q, batch="3", description=described(RUN1)))
    assert write == WriteId(Kind.FOREACH, Q, 3, run=RUN1, job="job1")
    # The job group holds the run id too (when a user replaced the description).
    assert identify(spec, props(query=Q, batch="3", group=RUN1)).run == RUN1


def test_a_foreachbatch_write_whose_run_cannot_be_told_asks_for_the_options():
    with pytest.raises(ConfigError, match="txnAppId.*txnVersion"):
        identify(WriteSpec(streaming=False, job="j"), props(query=Q, batch="3", group="my-own-group"))


def test_explicit_options_win_over_the_streams_properties():
    spec = WriteSpec.for_batch({"txnAppId": "orders", "txnVersion": "12"}.get, "job1")
    assert identify(spec, props(query=Q, batch="3", description=described(RUN1))) == \
        WriteId(Kind.APP, "orders", 12, job="job1")


def test_a_batch_job_outside_any_stream_has_its_own_identity():
    assert identify(WriteSpec(streaming=False, job="job1"), props()) == WriteId(Kind.JOB, "job1", 0, job="job1")


@pytest.mark.parametrize("options, message", [
    ({"txnAppId": "a"}, "go together"),
    ({"txnVersion": "1"}, "go together"),
    ({"txnAppId": "a", "txnVersion": "-1"}, "whole number"),
    ({"txnAppId": "a", "txnVersion": "one"}, "whole number"),
])
def test_bad_txn_options_are_refused_before_anything_runs(options, message):
    with pytest.raises(ConfigError, match=message):
        WriteSpec.for_batch(options.get, "job1")


def test_families_keep_writers_apart_and_bounded():
    stream, job = WriteId(Kind.STREAM, Q, 1), WriteId(Kind.JOB, "job1", 0, job="job1")
    run1 = WriteId(Kind.FOREACH, Q, 1, run=RUN1, job="x")
    run2 = WriteId(Kind.FOREACH, Q, 9, run=RUN2, job="y")
    assert stream.family == "" and job.family.startswith("j") and run1.family != run2.family
    # Every write of one run shares its family (ids reused as micro-batches reuse theirs) ...
    assert WriteId(Kind.FOREACH, Q, 2, run=RUN1, job="z").family == run1.family
    # ... and recovery of the stream's writes selects every run's.
    assert matches(run2.families, run1.family) and not matches(run2.families, job.family)
    assert WriteId(Kind.APP, "orders", 1).family == WriteId(Kind.APP, "orders", 2).family


# -- commit plans ----------------------------------------------------------------------

def part(i, attempt=0, records=10, family="f"):
    return Participant(f"p:{family}-{i}-{attempt}", i, attempt, records, KafkaHandle(1, 1))


def foreach(batch, run=RUN1):
    return WriteId(Kind.FOREACH, Q, batch, run=run, job=f"job-{batch}-{run[-1]}")


def test_writes_of_a_micro_batch_are_counted_in_order_within_a_run():
    first = plan_write(None, foreach(3), [part(0)])
    assert first.decision.write == 0 and first.decision.writes == 1 and not first.skip
    done = first.decision.with_state(DONE)
    second = plan_write(done, foreach(3), [part(0)])
    assert second.decision.write == 1 and second.decision.writes == 2 and not second.skip
    assert plan_write(second.decision.with_state(DONE), foreach(4), [part(0)]).decision.write == 0


def test_a_re_run_of_a_micro_batch_skips_the_writes_an_earlier_run_committed():
    two_done = Decision(Q, 3, DONE, (part(0),), write=1, run=RUN1, writes=2)
    again = plan_write(two_done, foreach(3, RUN2), [part(0)])
    assert again.skip and again.decision.write == 0 and again.decision.writes == 2
    again_2 = plan_write(again.decision, foreach(3, RUN2), [part(0)])
    assert again_2.skip and again_2.decision.write == 1
    new = plan_write(again_2.decision, foreach(3, RUN2), [part(0)])
    assert not new.skip and new.decision.write == 2 and new.decision.writes == 3


def test_two_runs_taking_turns_in_one_micro_batch_each_keep_their_own_count():
    # The new run commits write 0; the old run (a zombie) comes back and skips its copy of
    # write 0; the new run's write 1 must count from its own ordinal, not restart at 0.
    new_0 = plan_write(None, foreach(3, RUN2), [part(0)]).decision.with_state(DONE)
    old_0 = plan_write(new_0, foreach(3, RUN1), [part(0)])
    assert old_0.skip and old_0.decision.runs == {RUN1: 0, RUN2: 0}
    new_1 = plan_write(old_0.decision, foreach(3, RUN2), [part(0)])
    assert not new_1.skip and new_1.decision.write == 1 and new_1.decision.writes == 2
    # And the record survives the log: a written-and-read-back record counts the same.
    again = Decision.from_json(json.loads(json.dumps(old_0.decision.to_json())), KafkaHandle.from_json)
    assert again == old_0.decision and plan_write(again, foreach(3, RUN2), [part(0)]).decision.write == 1


def test_a_record_written_before_runs_were_kept_still_counts_its_own_run():
    older = Decision.from_json({"queryId": Q, "batchId": 3, "state": "done", "transactions": [], "write": 1,
                                "run": RUN1, "writes": 2}, KafkaHandle.from_json)
    assert older.ordinals() == {RUN1: 1}
    assert plan_write(older, foreach(3, RUN1), [part(0)]).decision.write == 2


def test_an_unfinished_foreachbatch_write_is_finished_before_the_next_one_counts():
    decided = Decision(Q, 3, DECIDED, (part(0),), write=0, run=RUN1, writes=1)
    plan = plan_write(decided, foreach(3, RUN2), [part(0)])
    assert plan.earlier == decided and plan.skip  # the re-run's write 0 was decided by run 1


def test_a_foreachbatch_write_of_an_older_micro_batch_is_refused():
    with pytest.raises(TransactionError, match="micro-batch 4 already wrote"):
        plan_write(Decision(Q, 4, DONE, run=RUN1), foreach(3, RUN2), [part(0)])


def test_the_latest_app_version_run_again_adds_nothing():
    app = Decision("orders", 5, DONE, (part(0),))
    plan = plan_write(app, WriteId(Kind.APP, "orders", 5), [part(1)])
    assert plan.skip and not plan.write_decision
    assert not plan_write(app, WriteId(Kind.APP, "orders", 6), [part(1)]).skip
    decided = Decision("orders", 5, DECIDED, (part(0),))
    same = plan_write(decided, WriteId(Kind.APP, "orders", 5), [part(1)])
    assert same.decision == decided and not same.write_decision


def test_a_stream_that_decided_before_refuses_to_share_its_ids_with_another_query():
    mine, theirs = Decision("q1", 4, DONE), Decision("q2", 9, DONE)
    with pytest.raises(TransactionError, match="q1 and query q2 both write") as info:
        stream_target(mine, theirs, "q1")
    assert not info.value.retriable
    assert stream_target(None, theirs, "q1") == theirs  # a new query replaces the old one
    assert stream_target(mine, mine, "q1") == mine


# -- the driver, with fakes -------------------------------------------------------------

def run_micro_batch(tpc, batch, run, writes=2):
    for _ in range(writes):
        tpc.commit(foreach(batch, run), [part(0, family=foreach(batch, run).family)])


def test_foreachbatch_writes_commit_each_write_and_a_re_run_adds_nothing():
    tpc, log, events = committer()
    run_micro_batch(tpc, 0, RUN1)
    run_micro_batch(tpc, 1, RUN1)
    committed = [e for e in events if e[0] == "commit"]
    assert len(committed) == 4                      # every write of every micro-batch committed
    events.clear()
    run_micro_batch(tpc, 1, RUN2)                   # Spark re-runs micro-batch 1 after a restart
    assert [e for e in events if e[0] == "commit"] == []
    assert ("fence", f"p:{foreach(1, RUN2).family}-0-0") in events
    run_micro_batch(tpc, 2, RUN2)
    assert len([e for e in events if e[0] == "commit"]) == 2


def test_a_stream_and_a_job_on_one_prefix_keep_their_own_done_marks():
    """A job on the stream's prefix must not hide the stream's decision: after a crash
    between the stream's commit and Spark's commit log, the re-run must be recognised."""
    tpc, log, events = committer()
    tpc.commit(WriteId(Kind.STREAM, "s", 1), [part(0, family="")])
    tpc.commit(WriteId(Kind.JOB, "w", 0, job="w"), [part(0, family="jabc")])
    assert tpc.recover(WriteId(Kind.STREAM, "s", -1)) == DoneMark("s", 1)


def test_a_job_finishes_another_jobs_unfinished_decision_and_forgets_its_own():
    stuck = Decision("w1", 0, DECIDED, (part(5, family="j1"),))
    tpc, log, events = committer(latest=stuck)
    log.records = [("j:w1", stuck)]
    tpc.commit(WriteId(Kind.JOB, "w2", 0, job="w2"), [part(0, family="j2")])
    assert events.index(("commit", "p:j1-5-0")) < events.index(("commit", "p:j2-0-0"))
    # The other job's decision is recorded done (its owner, if still committing, then sees
    # it done and fences nothing of it); only a job's own record is forgotten.
    assert log.latest("j:w1") == stuck.with_state(DONE)
    assert ("forget", "j:w1") not in events and ("forget", "j:w2") in events
    assert log.unfinished("j") == []


def test_a_job_keeps_another_jobs_decision_when_finishing_it_fails_part_way():
    from kafka_eos_ds.twophase import Outcome

    stuck = Decision("w1", 0, DECIDED, (part(5, family="j1"), part(6, family="j1")))
    tpc, log, events = committer(latest=stuck, outcomes={"p:j1-6-0": [Outcome.RETRY]}, timeout=1.0)
    log.records = [("j:w1", stuck)]
    with pytest.raises(TransactionError, match="Could not learn the outcome of committing p:j1-6-0"):
        tpc.commit(WriteId(Kind.JOB, "w2", 0, job="w2"), [part(0, family="j2")])
    assert log.unfinished("j") == [("j:w1", stuck)]  # the next writer finishes the rest


def test_a_job_whose_commit_does_not_get_through_says_its_output_is_decided_and_will_be_committed():
    from kafka_eos_ds.twophase import Outcome

    tpc, log, events = committer(outcomes={"p:j2-1-0": [Outcome.RETRY]}, timeout=1.0)
    with pytest.raises(TransactionError, match="The job's output is decided: its rows become visible.*txnAppId"):
        tpc.commit(WriteId(Kind.JOB, "w2", 0, job="w2"), [part(0, family="j2"), part(1, family="j2")])
    assert log.latest("j:w2").state is DecisionState.DECIDED  # the next writer on the prefix commits the rest


@pytest.mark.parametrize("kind", [Kind.JOB, Kind.APP])
def test_a_batch_write_whose_transaction_was_lost_says_its_output_is_partial_and_records_it(kind):
    """Before: the error of a lost transaction went on to say that the job's rows would
    become visible once the rest was committed; nothing was left to commit, and the next
    write on the prefix failed on the same loss."""
    from kafka_eos_ds.errors import TransactionLostError
    from kafka_eos_ds.twophase import Outcome

    family = "j2" if kind is Kind.JOB else WriteId(Kind.APP, "orders", 4).family
    tpc, log, events = committer(outcomes={f"p:{family}-1-0": [Outcome.LOST]})
    write = WriteId(kind, "w2" if kind is Kind.JOB else "orders", 0 if kind is Kind.JOB else 4, job="w2")
    with pytest.raises(TransactionLostError) as raised:
        tpc.commit(write, [part(0, family=family), part(1, family=family)])
    message = str(raised.value)
    assert "become visible" not in message and "not in the output" in message
    assert "output is partial" in message and "the committed ones a second time" in message
    if kind is Kind.JOB:
        assert log.latest(write.key).state is DecisionState.LOST
    else:
        # An app write stays decided: its user's retry, the same version again, fails the
        # same way (it never reports success without the lost rows).
        assert "fails the same way" in message and log.latest(write.key).state is DecisionState.DECIDED
        with pytest.raises(TransactionLostError):
            tpc.commit(write, [part(0, family=family)])
    # The next job on the prefix is not failed by it again.
    tpc.commit(WriteId(Kind.JOB, "w3", 0, job="w3"), [part(0, family="j3")])
    assert ("commit", "p:j3-0-0") in events


def test_a_job_whose_commit_outcome_cannot_be_told_says_what_to_check_and_records_it():
    from kafka_eos_ds.errors import TransactionOutcomeUnknownError
    from kafka_eos_ds.twophase import Outcome

    tpc, log, events = committer(outcomes={"p:j2-1-0": [Outcome.UNKNOWN]})
    with pytest.raises(TransactionOutcomeUnknownError, match="Check with a read_committed consumer") as raised:
        tpc.commit(WriteId(Kind.JOB, "w2", 0, job="w2"), [part(0, family="j2"), part(1, family="j2")])
    assert "become visible" not in str(raised.value)
    assert log.latest("j:w2").state is DecisionState.UNTOLD
    tpc.commit(WriteId(Kind.JOB, "w3", 0, job="w3"), [part(0, family="j3")])
