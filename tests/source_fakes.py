"""A fake Kafka for the stream reader's unit tests (partitions, offsets, group commits)."""

from __future__ import annotations

from kafka_eos_ds.source import KafkaStreamReader, source_schema


class FakeMetadata:
    def __init__(self, latest, earliest=None):
        self.latest_offsets = dict(latest)
        self.earliest_offsets = dict(earliest or {tp: 0 for tp in latest})
        self.commits = []

    def partitions(self):
        return set(self.latest_offsets)

    def latest(self, tps):
        return {tp: self.latest_offsets[tp] for tp in tps}

    def earliest(self, tps):
        return {tp: self.earliest_offsets[tp] for tp in tps}

    def consumer(self):
        return self

    def commit(self, *, offsets, asynchronous):
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})
        return offsets

    def __call__(self, options):
        """The reader's metadata factory: this fake, whatever the options."""
        return self


def reader(meta, **opts):
    options = {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "earliest", **opts}
    return KafkaStreamReader(source_schema(options), options, metadata_factory=meta)
