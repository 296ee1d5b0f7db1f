"""A batch the sink wrote, planned again by Spark with other offsets, with real Spark and a
real Kafka: the driver dies after the sink recorded batch 1 done and before Spark's commit
log has it (crash point 4); the operator deletes ``offsets/1`` and restarts with a smaller
``maxOffsetsPerTrigger``. Taken for written by its id, the smaller batch 1 would add
nothing and batch 2 would read the rest of the old batch 1 again (duplicates). It must
fail loudly, naming ``offsets/1``, with nothing written twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from integration.sink_runs import assert_crashed, run_pipeline, seed
from kafka_eos_tools.topics import consume_all

RECORDS, BATCH = 600, 150


@pytest.mark.full  # a refusal's message: the unit tests check the guard (test_replanned_batches.py)
def test_a_written_batch_planned_again_with_other_offsets_fails_loudly(kafka, new_topic, tmp_path, warm_driver):
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    seed(kafka.bootstrap, input_topic, RECORDS)
    checkpoint = tmp_path / "checkpoint"

    def run(max_offsets, fault=None):
        # The demo pipeline writes with sourceGroupId: its decisions record the batch's offsets.
        return run_pipeline(kafka.bootstrap, input_topic, output_topic, str(checkpoint), f"replan-{output_topic}",
                            fault=fault, max_offsets=max_offsets, log_dir=tmp_path / "logs", warm=warm_driver)

    assert_crashed(run(BATCH, "driver-after-done@1"))
    written = consume_all(kafka.bootstrap, output_topic)
    assert len(written) == 2 * BATCH
    for name in ("1", ".1.crc"):  # the operator re-plans batch 1
        (checkpoint / "offsets" / name).unlink(missing_ok=True)
    assert not (Path(checkpoint) / "commits" / "1").exists()

    again = run(BATCH // 3)
    assert again.returncode != 0, "batch 1 planned again was taken for written:\n" + again.log[-3000:]
    assert "the checkpoint's offsets/1 now ends at" in again.log, again.log[-3000:]
    out = consume_all(kafka.bootstrap, output_topic)
    assert len(out) == 2 * BATCH and len({r.value for r in out}) == 2 * BATCH
