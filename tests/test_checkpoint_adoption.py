"""Moving a query to the exactly-once sink on its checkpoint (``adoptCheckpoint``).

A checkpoint written by ``format("kafka")`` or by ``deliveryGuarantee=at_least_once`` has
committed batches and no decision in the commit log, as one whose commit log was lost
does. Told apart by the user's explicit option, and refused where the sink can see that
an exactly-once writer was there before (docs/dev/decisions.md, "Adopting a checkpoint").
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kafka_eos_ds.errors import ConfigError, TransactionError
from kafka_eos_ds.kafka_sink import sink as kafka_sink
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.twophase import Kind, WriteId, WriteSpec
from kafka_eos_ds.twophase.protocol import DECIDED, DONE, Decision, DoneMark, Participant
from tests.sink_fakes import kafka_runtime
from tests.test_sink_units import OPTS, SCHEMA, _fence_free
from tests.test_twophase import FakeLog


class _Metadata:
    topics = {"out": None}


class _Coordinator:
    """The transaction coordinators: ListTransactions answers only (every id they know)."""

    def __init__(self, known=()):
        self.known = list(known)  # (id, producer id, state)

    def list_transactions(self, id_regex=None, open_only=True):
        import re

        return [t for t in self.known if (id_regex is None or re.match(id_regex, t[0]))
                and (not open_only or t[2] == "Ongoing")]

    def refresh(self):
        pass

    def close(self):
        pass


def _checkpoint(tmp_path, committed, query="q1"):
    (tmp_path / "metadata").write_text(json.dumps({"id": query}) + "\n")
    (tmp_path / "commits").mkdir()
    for batch in range(committed + 1):
        (tmp_path / "commits" / str(batch)).write_text("v1\n{}\n")
    return str(tmp_path)


@pytest.fixture
def driver():
    """The sink's driver steps on an in-memory decision log and scripted coordinators."""
    state = {"log": _fence_free(FakeLog()), "coordinator": _Coordinator()}
    state["runtime"] = kafka_runtime(lambda conf, **_: state["coordinator"], lambda *a, **k: state["log"], _Metadata())
    return state


def _prepare(driver, checkpoint, **options):
    config = SinkConfig.from_options({**OPTS, "checkpointLocation": checkpoint, **options}, SCHEMA)
    return kafka_sink.KafkaSink(replace(config, commit_timeout_s=5), runtime=driver["runtime"]).prepare(
        WriteSpec(streaming=True))


def test_a_checkpoint_of_another_sink_is_adopted_at_its_latest_committed_batch(driver, tmp_path):
    mark = _prepare(driver, _checkpoint(tmp_path, 5), adoptCheckpoint="true")
    # Batch 5 (and all before it) recorded done before any task writes: the next batch, 6
    # (or a re-run of one the old sink had started), is written under a decision.
    assert driver["log"].records == [("q:q1", Decision("q1", 5, DONE))]
    assert mark == DoneMark("q1", 5)
    assert not mark.covers("q1", 6)


def test_without_the_option_the_refusal_names_it_and_nothing_is_written(driver, tmp_path):
    with pytest.raises(TransactionError, match=r"holds no decision of query q1 .* up to 5.*"
                                               r"\.option\('adoptCheckpoint', 'true'\)") as refused:
        _prepare(driver, _checkpoint(tmp_path, 5))
    assert not refused.value.retriable
    assert 'docs/troubleshooting.md, "The commit log lost its decisions"' in str(refused.value)
    assert driver["log"].records == []


def test_a_query_that_has_decisions_ignores_the_option(driver, tmp_path):
    driver["log"].records.append(("q:q1", Decision("q1", 8, DONE)))
    assert _prepare(driver, _checkpoint(tmp_path, 8), adoptCheckpoint="true") == DoneMark("q1", 8)
    assert len(driver["log"].records) == 1  # nothing recorded over the query's own decision


def test_ids_the_coordinators_know_refuse_the_adoption(driver, tmp_path):
    """format("kafka") and at_least_once write without transactional ids: a coordinator that
    knows the prefix's ids saw an exactly-once writer, whose lost decisions adopting would
    take for none (a decided, partly committed batch written again)."""
    driver["coordinator"].known = [("etl-0-0", 7, "CompleteCommit"), ("other-0-0", 8, "Ongoing")]
    with pytest.raises(TransactionError, match=r"etl-0-0.*exactly-once.*lost its decisions") as refused:
        _prepare(driver, _checkpoint(tmp_path, 5), adoptCheckpoint="true")
    assert not refused.value.retriable
    assert driver["log"].records == []


def test_a_prefix_another_stream_decided_on_is_not_adopted(driver, tmp_path):
    """Another query's decision (an unfinished one: its decided transactions would be fenced
    as leftovers) stays that query's: this one needs a prefix of its own."""
    other = Decision("q0", 3, DECIDED, (Participant("etl-0-0", 0, 0, 5, KafkaHandle(7, 1)),))
    driver["log"].records.append(("q:q0", other))
    with pytest.raises(TransactionError, match=r"query q0 decided batch 3.*'transactionalIdPrefix' of its own"):
        _prepare(driver, _checkpoint(tmp_path, 5), adoptCheckpoint="true")
    assert driver["log"].records == [("q:q0", other)]


@pytest.mark.parametrize("options, match", [
    ({"deliveryGuarantee": "at_least_once"}, "needs deliveryGuarantee 'exactly_once'"),
    ({"adoptCheckpoint": "maybe"}, "must be true or false"),
])
def test_the_option_is_checked(options, match):
    with pytest.raises(ConfigError, match=match):
        SinkConfig.from_options({**OPTS, "adoptCheckpoint": "true", **options}, SCHEMA)


def test_a_batch_write_refuses_the_option():
    with pytest.raises(ConfigError, match="'adoptCheckpoint'.*streaming"):
        kafka_sink.batch_writer(SCHEMA, {**OPTS, "adoptCheckpoint": "true"}, overwrite=False)


def test_an_adopted_batch_is_the_queries_own_decision_for_the_next_commit(driver, tmp_path, monkeypatch):
    """After the adoption the next batch commits as any other."""
    from kafka_eos_ds.twophase import Outcome

    checkpoint = _checkpoint(tmp_path, 5)
    _prepare(driver, checkpoint, adoptCheckpoint="true")
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "commit", lambda self, p: Outcome.COMMITTED)
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "unfit", lambda self, parts, needed: None)
    config = SinkConfig.from_options({**OPTS, "checkpointLocation": checkpoint, "adoptCheckpoint": "true"}, SCHEMA)
    kafka_sink.KafkaSink(replace(config, commit_timeout_s=5), runtime=driver["runtime"]).commit(
        WriteId(Kind.STREAM, "q1", 6), [Participant("etl-0-0", 0, 0, 5, KafkaHandle(7, 1))])
    assert [(d.batch_id, d.state) for _, d in driver["log"].records] == [(5, DONE), (6, DECIDED), (6, DONE)]
