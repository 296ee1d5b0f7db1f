"""The embedded Kafka is a real Apache Kafka: transactions commit and abort for real."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer

from kafka_eos_tools.topics import consume_all


def _transactional_producer(bootstrap: str, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(60)
    return producer


def test_committed_records_are_visible_and_aborted_ones_are_not(kafka, new_topic):
    topic = new_topic(partitions=2)
    producer = _transactional_producer(kafka.bootstrap, f"smoke-{topic}")
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"committed-{i}".encode(), partition=i % 2)
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"aborted-{i}".encode(), partition=i % 2)
    producer.flush(30)
    producer.abort_transaction(60)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed-last", partition=0)
    producer.commit_transaction(60)

    committed = sorted(r.value for r in consume_all(kafka.bootstrap, topic, "read_committed"))
    everything = sorted(r.value for r in consume_all(kafka.bootstrap, topic, "read_uncommitted"))

    assert committed == sorted([f"committed-{i}".encode() for i in range(10)] + [b"committed-last"])
    # The aborted records are physically in the log; only isolation hides them.
    assert sorted(v for v in everything if v.startswith(b"aborted")) == [f"aborted-{i}".encode() for i in range(5)]


def test_open_transaction_holds_back_read_committed(kafka, new_topic):
    topic = new_topic()
    producer = _transactional_producer(kafka.bootstrap, f"open-{topic}")
    producer.begin_transaction()
    producer.produce(topic, value=b"pending")
    producer.flush(30)
    assert consume_all(kafka.bootstrap, topic, "read_committed") == []
    assert [r.value for r in consume_all(kafka.bootstrap, topic, "read_uncommitted")] == [b"pending"]
    producer.commit_transaction(60)
    assert [r.value for r in consume_all(kafka.bootstrap, topic, "read_committed")] == [b"pending"]


@pytest.mark.full  # the gate's 3-broker cluster (kafka3) starts and stops through the same code
def test_cli_three_brokers_start_and_stop_leave_no_process(tmp_path, kafka):
    if kafka.kind != "embedded":
        pytest.skip(f"the broker CLI is tested with the embedded Kafka; this run uses {kafka.kind}")
    directory = tmp_path / "cli-cluster"
    cli = [sys.executable, "-m", "kafka_eos_tools.cli", "broker"]
    started = subprocess.run([*cli, "start", "--brokers", "3", "--dir", str(directory)],
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip().splitlines()[-1]
    assert bootstrap.count("127.0.0.1:") == 3
    from kafka_eos_tools.broker.cluster import EmbeddedKafka

    pids = [n.pid for n in EmbeddedKafka.load(directory).nodes]
    try:
        # A second start in the same directory reuses the running cluster.
        again = subprocess.run([*cli, "start", "--brokers", "3", "--dir", str(directory)],
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().splitlines()[-1] == bootstrap
        assert [n.pid for n in EmbeddedKafka.load(directory).nodes] == pids
        # A different size in the same directory is refused, not half-started.
        refused = subprocess.run([*cli, "start", "--brokers", "1", "--dir", str(directory)],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "already running" in refused.stderr
    finally:
        stopped = subprocess.run([*cli, "stop", "--dir", str(directory)], capture_output=True, text=True,
                                 timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    from kafka_eos_tools.broker.node import is_alive

    assert not any(is_alive(pid) for pid in pids)


@pytest.mark.full  # the harness's own broker kill; the gate's sink and source tests kill brokers through it
def test_hard_killed_broker_restarts_and_cluster_keeps_transactions(kafka3):
    from kafka_eos_tools.topics import create_topic, unique_name

    topic = create_topic(kafka3.bootstrap, unique_name("bounce"), 3, 3)
    kafka3.cluster.kill(2)
    producer = _transactional_producer(kafka3.bootstrap, f"bounce-{topic}")
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, value=str(i).encode(), partition=i % 3)
    producer.commit_transaction(60)
    kafka3.cluster.restart(2)
    values = sorted(int(r.value) for r in consume_all(kafka3.bootstrap, topic))
    assert values == list(range(30))


def test_default_kafka4_broker_runs_transaction_protocol_v2(kafka):
    """The 4.x line is tested with transaction.version 2 finalized (KIP-890), as a
    Kafka 4 cluster is by default; the sink must work there with librdkafka's v1 clients."""
    if kafka.kind != "embedded" or not kafka.cluster.kafka_version.startswith("4."):
        pytest.skip(f"checks the embedded Kafka 4.x default; this run uses {kafka.kind}")
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        features = admin.describe_features()
    finally:
        admin.close()
    assert features["transaction.version"]["finalized"] == (2, 2)


def test_a_late_end_txn_commits_the_next_transaction_of_a_producer_that_kept_its_epoch(kafka, new_topic):
    """Why a task's producer is never kept for the next batch (docs/dev/decisions.md, "Task
    producers are not kept across batches"): librdkafka runs every transaction of one
    producer under one epoch, so an EndTxn(commit) sent late for the transaction the driver
    already committed commits the producer's next one, undecided. A new producer per batch
    (``init_transactions()``: a new epoch) has the same late EndTxn refused."""
    from kafka_eos_ds.kafka.coordinator import (
        INVALID_PRODUCER_EPOCH,
        NONE,
        PRODUCER_FENCED,
        TransactionCoordinator,
        TxnStatus,
    )

    topic = new_topic()
    tid = f"kept-{topic}"
    with TransactionCoordinator({"bootstrap.servers": kafka.bootstrap}) as coordinator:
        def settled(state: str) -> None:
            for _ in range(500):
                if coordinator.describe(tid).state == state:
                    return
                time.sleep(0.01)
            raise AssertionError(f"{tid} never reached {state}")

        def visible() -> list:
            return [r.value for r in consume_all(kafka.bootstrap, topic, "read_committed")]

        kept = _transactional_producer(kafka.bootstrap, tid)
        kept.begin_transaction()
        kept.produce(topic, value=b"batch-1")
        kept.flush(30)
        first = coordinator.describe(tid)
        # The driver commits batch 1; the kept producer completes it on its side and begins batch 2.
        assert coordinator.end_txn(tid, first.producer_id, first.producer_epoch, commit=True) == NONE
        settled(TxnStatus.COMPLETE_COMMIT)
        kept.commit_transaction(60)
        kept.begin_transaction()
        kept.produce(topic, value=b"batch-2")
        kept.flush(30)
        second = coordinator.describe(tid)
        assert (second.state, second.producer_id, second.producer_epoch) == (
            TxnStatus.ONGOING, first.producer_id, first.producer_epoch)
        assert visible() == [b"batch-1"]
        # A late EndTxn of batch 1 (a zombie driver, a resent request) commits batch 2.
        assert coordinator.end_txn(tid, first.producer_id, first.producer_epoch, commit=True) == NONE
        settled(TxnStatus.COMPLETE_COMMIT)
        assert visible() == [b"batch-1", b"batch-2"]

        # Today's path: a new producer, a new epoch; the same late EndTxn is refused.
        fresh = _transactional_producer(kafka.bootstrap, tid)
        fresh.begin_transaction()
        fresh.produce(topic, value=b"batch-3")
        fresh.flush(30)
        assert coordinator.describe(tid).producer_epoch > first.producer_epoch
        refused = coordinator.end_txn(tid, first.producer_id, first.producer_epoch, commit=True)
        assert refused in (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH)  # the name depends on the request version
        assert visible() == [b"batch-1", b"batch-2"]
        fresh.abort_transaction(60)
