"""What a failed ``df.write`` leaves open holds back every ``read_committed`` reader of the
partitions it wrote until ``kafka.transaction.timeout.ms``: an abort must fence the ids
the write's tasks used (docs/troubleshooting.md, "read_committed consumers stall")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kafka_eos_ds.kafka_sink import sink as kafka_sink
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.twophase import Kind, WriteId, WriteSpec
from kafka_eos_ds.twophase.protocol import Instance
from tests.sink_fakes import kafka_runtime
from tests.test_checkpoint_adoption import _Coordinator
from tests.test_sink_units import OPTS, SCHEMA, _fence_free
from tests.test_twophase import FakeLog


@pytest.fixture
def fenced(monkeypatch):
    """The ids the sink's abort fenced, on an in-memory decision log; the coordinators
    know one open id of the app write's family and one of its batch job's."""
    app, job = WriteId(Kind.APP, "orders", 3, job="j1"), WriteId(Kind.JOB, "j1", 0, job="j1")
    coordinator = _Coordinator([(f"etl:{app.family}-0-0", 7, "Ongoing"), (f"etl:{job.family}-0-0", 8, "Ongoing")])
    ids: list[str] = []
    logs = [_fence_free(FakeLog())]  # every step's log: the last one
    runtime = kafka_runtime(lambda conf, **_: coordinator, lambda *a, **k: logs[-1])
    # The abort fences exact instances (validate, then act): the ids it observed are the
    # ids it aims at; the claim on the in-memory log always holds.
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "observe",
                        lambda self, targets: [Instance(tid, "7/0") for tid in targets])
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "abort_exact",
                        lambda self, instance: ids.append(instance.id) or True)
    monkeypatch.setattr(kafka_sink.KafkaFences, "claim", lambda self, targets: None)
    yield ids, app, job, runtime, logs


def test_an_app_write_that_no_task_reported_fences_its_apps_ids(fenced):
    """``txnAppId`` writes: the tasks ran under the app's family (the planner knows it);
    the batch job's own family holds nothing of theirs."""
    ids, app, _job, runtime, _logs = fenced
    sink = kafka_sink.KafkaSink(replace(SinkConfig.from_options(OPTS, SCHEMA), commit_timeout_s=5), runtime=runtime)
    sink.abort(None, [], WriteSpec(False, job="j1", app="orders", version=3))
    assert set(ids) == {f"etl:{app.family}-0-0"}


def test_an_app_writes_abort_keeps_the_transactions_of_its_decided_write(fenced):
    """An earlier version of the app decided and not finished: its transaction is the next
    write's to commit, never an abort's to fence."""
    from kafka_eos_ds.kafka_sink.messages import KafkaHandle
    from kafka_eos_ds.twophase.protocol import DECIDED, Decision, Participant

    ids, app, _job, runtime, logs = fenced
    log = _fence_free(FakeLog())
    log.records.append((app.key, Decision("orders", 2, DECIDED, (Participant(f"etl:{app.family}-0-0", 0, 0, 5,
                                                                                  KafkaHandle(7, 3)),))))
    logs.append(log)
    sink = kafka_sink.KafkaSink(replace(SinkConfig.from_options(OPTS, SCHEMA), commit_timeout_s=5), runtime=runtime)
    sink.abort(None, [], WriteSpec(False, job="j1", app="orders", version=3))
    assert ids == []


def test_a_batch_job_that_no_task_reported_fences_its_own_ids(fenced):
    ids, _app, job, runtime, _logs = fenced
    sink = kafka_sink.KafkaSink(replace(SinkConfig.from_options(OPTS, SCHEMA), commit_timeout_s=5), runtime=runtime)
    sink.abort(None, [], WriteSpec(False, job="j1"))
    assert set(ids) == {f"etl:{job.family}-0-0"}


class _Tool(_Coordinator):
    """The coordinators as the transactions tool uses them."""

    def __init__(self, known):
        super().__init__(known)
        self.fenced = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def describe(self, tid):
        from kafka_eos_ds.kafka.coordinator import TxnState

        pid, state = next((p, s) for t, p, s in self.known if t == tid)
        return TxnState(tid, state, pid, 0, 1, 900_000)

    def fence(self, tid, timeout_ms):
        self.fenced.append(tid)


@pytest.mark.parametrize("family, aborted", [
    ("j08243666", ["etl:j08243666-0-0"]),                 # the crashed job's only
    ("j*", ["etl:j08243666-0-0", "etl:j11111111-1-0"]),   # every batch job's
    ("", ["etl-0-0"]),                                     # the stream's own
    (None, ["etl-0-0", "etl:j08243666-0-0", "etl:j11111111-1-0"]),
])
def test_the_abort_tool_takes_a_family_so_a_crashed_job_is_aborted_beside_a_running_stream(monkeypatch, family,
                                                                                             aborted):
    from kafka_eos_ds.kafka_sink import transactions_tool

    tool = _Tool([("etl-0-0", 1, "Ongoing"), ("etl:j08243666-0-0", 2, "Ongoing"), ("etl:j11111111-1-0", 3, "Ongoing"),
                  ("etl-2-0", 4, "CompleteCommit"), ("etlx-0-0", 5, "Ongoing")])
    monkeypatch.setattr(transactions_tool, "TransactionCoordinator", lambda conf: tool)
    found = transactions_tool.abort_transactions({}, "etl", family=family)
    assert sorted(t.transactional_id for t in found) == sorted(tool.fenced) == aborted
