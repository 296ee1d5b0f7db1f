"""Moving a query from Spark's built-in ``format("kafka")`` sink to ``format("kafka_eos")``
on the same checkpoint (``adoptCheckpoint``), against a real broker and real Spark.

The built-in sink writes the first half of the input at-least-once and stops; the
exactly-once sink, refused without the option (writing nothing), continues with it from
the checkpoint's offsets: the output holds every input record once, nothing re-read from
the start, nothing lost.
"""

from __future__ import annotations

import pytest

from integration.sink_runs import run_pipeline, seed
from kafka_eos_ds.kafka_sink import list_transactions
from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog
from kafka_eos_tools.audit import audit

# Pipelines of their own (about 2 minutes): the gate runs it in its second lane, which
# run 17 measured the shorter (docs/dev/testing.md, "Runs of the gate").
pytestmark = pytest.mark.second_lane

HALF = 300  # 2 input partitions, 150 offsets per batch: batches 0..1 built-in, 2..3 kafka_eos
BATCH = 150


@pytest.fixture
def builtin_jars():
    from kafka_eos_tools.builtin_kafka import builtin_kafka_jars

    return builtin_kafka_jars()[0]


def test_a_builtin_sinks_checkpoint_is_adopted_and_continued_exactly_once(kafka, new_topic, tmp_path, builtin_jars):
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    conf = {"bootstrap.servers": kafka.bootstrap}
    prefix, log_topic = f"adopt-{output_topic}", f"log-{output_topic}"
    checkpoint = str(tmp_path / "checkpoint")

    def run(sink_format, *sink_options, job_args=()):
        return run_pipeline(kafka.bootstrap, input_topic, output_topic, checkpoint, prefix, max_offsets=BATCH,
                            timeout=400, log_dir=tmp_path / "logs", sink_format=sink_format, job_args=job_args,
                            sink_options=[f"commitLogTopic={log_topic}", *sink_options]
                            if sink_format == "kafka_eos" else list(sink_options))

    seed(kafka.bootstrap, input_topic, HALF)
    first = run("kafka", job_args=["--jars", builtin_jars])
    assert first.returncode == 0, first.log[-3000:]
    written = audit(conf, input_topic, output_topic)
    assert written.records_in == written.unique_out == HALF and written.losses == 0, written.table()

    seed(kafka.bootstrap, input_topic, HALF, start=HALF)
    refused = run("kafka_eos")
    assert refused.returncode != 0
    assert "holds no decision" in refused.log and ".option('adoptCheckpoint', 'true')" in refused.log, \
        refused.log[-3000:]
    assert audit(conf, input_topic, output_topic).records_out == written.records_out  # nothing written

    adopted = run("kafka_eos", "adoptCheckpoint=true")
    assert adopted.returncode == 0, adopted.log[-3000:]
    assert "adopting checkpoint" in adopted.log
    report = audit(conf, input_topic, output_topic)
    # The built-in's records (each once here: it did not crash) plus the second half
    # exactly once; nothing of the first half read again.
    assert report.records_in == 2 * HALF and report.losses == 0 and report.unexpected == 0, report.table()
    assert report.records_out == written.records_out + HALF and report.duplicates == written.duplicates, \
        report.table()
    # Its batches were decided after the adopted one; nothing left open.
    decisions = KafkaDecisionLog(conf, log_topic, prefix)
    try:
        latest = decisions.latest_of("q")
        assert latest is not None and latest.batch_id >= 2 and latest.state.value == "done", latest
    finally:
        decisions.close()
    assert [t for t in list_transactions(conf, prefix) if t.open] == []

