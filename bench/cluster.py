"""The Kafka a bench runs against: the one given (``--bootstrap``), or an embedded
single-node KRaft broker started for the run and stopped, its data deleted, at the end."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def bench_kafka(bootstrap: str | None, brokers: int = 1) -> Iterator[tuple[str, str]]:
    """``(bootstrap servers, what they are)`` for the ``with`` block."""
    if bootstrap:
        yield bootstrap, f"at {bootstrap}"
        return
    from kafka_eos_tools.broker.cluster import EmbeddedKafka

    work = tempfile.mkdtemp(prefix="bench-kafka-")
    cluster = EmbeddedKafka(work, brokers=brokers)
    try:
        yield cluster.start(), "embedded"
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)  # a long run leaves gigabytes of topic data
