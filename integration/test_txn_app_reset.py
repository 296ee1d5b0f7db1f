"""``txnAppId`` with ``txnVersion=batch_id`` (the Spark Connect pattern) after a checkpoint
reset, with real Spark and a real Kafka: the new query numbers its micro-batches from 0
again, below the versions its writes' ``txnAppId`` already wrote. Those writes must fail
loudly naming ``txnAppId`` (never be taken for written, their rows dropped), and nothing
may be written twice.
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from integration.sink_runs import run_pipeline, seed
from kafka_eos_tools.audit import audit
from kafka_eos_tools.topics import consume_all, end_offsets

RECORDS, MORE, BATCH = 600, 200, 150  # micro-batches 0..3, then the new query's 0..1


def _start_group_at(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """What an operator does to start a new query where the input was consumed: commit the
    group's offsets (the pipeline reads with ``startingOffsets=group``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def test_a_txnversion_below_the_apps_latest_after_a_checkpoint_reset_fails_loudly(kafka, new_topic, tmp_path,
                                                                                    warm_driver):
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    prefix = f"reset-{output_topic}"
    seed(kafka.bootstrap, input_topic, RECORDS)

    def run(checkpoint: str):
        return run_pipeline(kafka.bootstrap, input_topic, output_topic, str(tmp_path / checkpoint), prefix,
                            max_offsets=BATCH, log_dir=tmp_path / "logs",
                            job_args=["--foreach-batch", "--txn-app-id", "orders"], warm=warm_driver)

    first = run("checkpoint")
    assert first.returncode == 0, first.log[-3000:]
    report = audit({"bootstrap.servers": kafka.bootstrap}, input_topic, output_topic)
    assert report.ok and report.unique_out == RECORDS == report.records_out, report.table()

    # A code change: a new checkpoint, starting where the input was consumed; more input.
    _start_group_at(kafka.bootstrap, f"{prefix}-source", input_topic, end_offsets(kafka.bootstrap, input_topic))
    seed(kafka.bootstrap, input_topic, MORE, start=RECORDS)
    second = run("checkpoint-new")
    assert second.returncode != 0, "the new query's writes at txnVersion 0.. were taken for written:\n" \
        + second.log[-3000:]
    assert "Refusing the write of txnAppId 'orders' at txnVersion 0" in second.log, second.log[-3000:]
    # Nothing of the refused writes is visible, and nothing was written twice.
    out = consume_all(kafka.bootstrap, output_topic)
    assert len(out) == RECORDS and len({r.value for r in out}) == RECORDS
