"""The chaos scenarios, at full scale: at least the scale of one run of Kafka's own
transactions system test (3 brokers, RF 3, min ISR 2, >= 100,000 input records, hard and
clean bounces: a run bounces each broker once, or each copier three times), here of
driver, workers and brokers, each kind at least once a scenario (marked ``full`` in
integration/test_chaos.py), and Spark's built-in sink's reduced run beside them for
comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scenario:
    name: str
    records: int
    input_partitions: int
    output_partitions: int
    bounces: list[str] = field(default_factory=list)
    shuffle: bool = False
    max_offsets: int = 2000


_MIXED = ["driver-hard", "worker-hard", "driver-inbatch", "broker-hard", "driver-clean", "broker-clean"]

PROFILES = {
    # Each bounce kind once a scenario (17 bounces in all; 43 until 2026-11-29, when the
    # full profile had to fit in 60 minutes: docs/dev/decisions.md, "The chaos module runs
    # each scenario once, at full scale"). The bounces' moments differ from run to run, so
    # the runs add up to more than any one of them.
    # ``records`` is the least input: the run keeps feeding IN while bounces remain
    # (InputFeeder), so a fast run cannot drain its input before its last bounce.
    "full": [
        Scenario("2->3 partitions, mixed bounces", 100_000, 2, 3, _MIXED, max_offsets=1000),
        Scenario("1->1 partition, order kept", 100_000, 1, 1,
                 ["driver-hard", "broker-hard", "worker-hard", "driver-inbatch", "driver-clean"],
                 max_offsets=1000),
        Scenario("shuffle before the sink", 100_000, 2, 3, ["driver-hard", "broker-hard", "worker-hard"],
                 shuffle=True, max_offsets=1000),
        Scenario("checkpoint lost", 100_000, 2, 3, ["checkpoint-lost", "driver-inbatch", "broker-hard"],
                 max_offsets=1000),
    ],
}

# Spark's built-in sink (at-least-once) under the same kind of run, for comparison: its
# duplicates are counted, not asserted. Kills aimed inside a batch are what it replays.
BUILTIN = {
    "reduced": Scenario("built-in sink, driver-inbatch x2", 8_000, 2, 3, ["driver-inbatch"] * 2, max_offsets=1000),
}
