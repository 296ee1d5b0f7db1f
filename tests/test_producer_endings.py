"""A task's pre-committed transaction survives every way the task ends.

confluent-kafka 2.16 made ``Producer.close()``, and leaving a ``with Producer(...)`` block,
abort an open transaction. A task leaves its transaction open for the driver to commit,
so no path of the task writer may close, context-manage or abort the producer once it
holds a pre-committed transaction: it is only dropped, and librdkafka's destroy (the
garbage collector's, or the worker's exit) leaves the transaction open
(integration/test_producer_endings.py shows it on a broker).

The producer here is the real ``confluent_kafka.Producer`` class, subclassed to record
its calls and to stand in for the broker's answers: a ``close()``, a ``with`` block or an
abort in the writer reaches the recorder.
"""

from __future__ import annotations

import gc
import weakref

import confluent_kafka
import pyarrow as pa
import pytest

from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.kafka_sink.task_writer import write_partition
from kafka_eos_ds.twophase import Kind, WriteId, faults
from kafka_eos_ds.twophase.protocol import DoneMark
from kafka_eos_ds.twophase.writers import Task
from tests.test_sink_units import OPTS, SCHEMA

# What ends a transaction from the client: any of them after the flush loses it.
ENDING = {"close", "__enter__", "__exit__", "abort_transaction", "commit_transaction", "purge"}


class _Recording(confluent_kafka.Producer):
    calls: list[str] = []
    destroyed: list[str] = []

    def __init__(self, conf):
        super().__init__({k: v for k, v in conf.items() if k != "bootstrap.servers"})  # nothing to connect to
        self._stats = conf.get("stats_cb")
        _Recording.calls.append("new")
        weakref.finalize(self, _Recording.destroyed.append, "destroyed")

    def _serve(self):
        if self._stats is not None:
            self._stats('{"eos": {"idemp_state": "Assigned", "producer_id": 42, "producer_epoch": 3}}')

    # The broker's answers (nothing to connect to).
    def list_topics(self, topic=None, timeout=-1):
        _Recording.calls.append("list_topics")

    def init_transactions(self, timeout=-1):
        _Recording.calls.append("init_transactions")

    def begin_transaction(self):
        _Recording.calls.append("begin_transaction")

    def produce(self, topic, value=None, key=None, partition=-1, **kwargs):
        _Recording.calls.append("produce")

    def poll(self, timeout=-1):
        self._serve()
        return 0

    def flush(self, timeout=-1):
        _Recording.calls.append("flush")
        self._serve()
        return 0

    # What would end the transaction: recorded, then the real call.
    def close(self, *args, **kwargs):
        _Recording.calls.append("close")
        return super().close(*args, **kwargs)

    def __enter__(self):
        _Recording.calls.append("__enter__")
        return super().__enter__()

    def __exit__(self, *exc):
        _Recording.calls.append("__exit__")
        return super().__exit__(*exc)

    def abort_transaction(self, timeout=-1):
        _Recording.calls.append("abort_transaction")

    def commit_transaction(self, timeout=-1):
        _Recording.calls.append("commit_transaction")

    def purge(self, *args, **kwargs):
        _Recording.calls.append("purge")


CONFIG = SinkConfig.from_options(OPTS, SCHEMA)  # checked before the recorder stands in (checking builds a client)


@pytest.fixture
def recording(monkeypatch):
    _Recording.calls, _Recording.destroyed = [], []
    monkeypatch.setattr(confluent_kafka, "Producer", _Recording)
    yield _Recording
    faults.install(None)


def _write(fail_at=None):
    def hook(point, **_):
        if point == fail_at:
            raise RuntimeError(f"the task dies at {point}")

    faults.install(hook if fail_at else None)
    rows = pa.record_batch([pa.array(["k1", "k2"]), pa.array([b"v1", b"v2"])], names=["key", "value"])
    return write_partition(CONFIG, Task(WriteId(Kind.STREAM, "q", 5), 0, 0), DoneMark(), iter([rows]))


def _after_flush(calls):
    return calls[calls.index("flush") + 1:]


def test_a_task_that_ends_normally_leaves_its_transaction_to_the_driver(recording):
    message = _write()
    assert message.records == 2 and (message.producer_id, message.epoch) == (42, 3)
    # Dropped when the task returned (so nothing later in the worker's life, its exit
    # included, can reach it), without a call that ends the transaction.
    gc.collect()
    assert recording.destroyed == ["destroyed"]
    assert not ENDING & set(_after_flush(recording.calls)), recording.calls


def test_a_task_that_fails_after_its_pre_commit_leaves_its_transaction_open(recording):
    with pytest.raises(RuntimeError, match="task-after-precommit"):
        _write(fail_at="task-after-precommit")
    gc.collect()
    assert recording.destroyed == ["destroyed"]
    assert not ENDING & set(_after_flush(recording.calls)), recording.calls


def test_a_task_that_fails_before_its_pre_commit_aborts_its_transaction(recording):
    """The recorder sees an ending call where the writer makes one: a transaction that was
    never pre-committed is the task's to abort."""
    with pytest.raises(RuntimeError, match="task-before-precommit"):
        _write(fail_at="task-before-precommit")
    gc.collect()
    assert "abort_transaction" in recording.calls and "flush" not in recording.calls
    assert recording.destroyed == ["destroyed"]


def test_no_producer_of_the_package_is_closed_or_context_managed_where_it_holds_a_transaction():
    """Static check beside the recorder: the task writer never closes its producer nor uses
    it in a ``with`` block (a path the tests above may not take)."""
    import ast
    import inspect

    from kafka_eos_ds.kafka_sink import task_writer

    tree = ast.parse(inspect.getsource(task_writer))
    closes = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
              and node.attr in ("close", "__exit__", "__del__")]
    withs = [node.lineno for node in ast.walk(tree) if isinstance(node, (ast.With, ast.AsyncWith))]
    assert closes == [] and withs == [], (closes, withs)
