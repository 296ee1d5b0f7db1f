"""A producer's start: a broker connection first, then ``init_transactions()``.

librdkafka looks the transaction coordinator up through any broker connection that is
up; right after ``Producer()`` none is, and the lookup then waits for a 500 ms retry
timer. Measured on the sink's decision writer, a new one in every driver step: about one
``init_transactions()`` in three took ~530 ms instead of ~30 ms (docs/dev/decisions.md, "Task
producer start"). Two metadata requests bring a connection up first: the first reaches
the bootstrap server, the second connects a broker it learned, which stays up.

An idempotent producer (``at_least_once``'s default) asks for its producer id the same
way before it sends its first record, and waited the same timer: an ``at_least_once``
pipeline of 10 micro-batches ran 2x slower than the exactly-once one (docs/dev/benchmarks.md,
"Driver steps and the pipeline's floors"). It is connected first too
(:func:`connect`).
"""

from __future__ import annotations

from kafka_eos_ds.kafka.clients import ProducerLike


def connect(producer: ProducerLike, topic: str | None) -> None:
    """Bring a broker connection of ``producer`` up: metadata of ``topic`` (a topic known to
    exist: a missing one could be auto-created; None: all topics), twice. Best effort: the
    calls that follow report a cluster that does not answer."""
    from confluent_kafka import KafkaException

    try:
        for _ in range(2):
            producer.list_topics(topic, timeout=10)
    except KafkaException:
        pass


def init_transactions(producer: ProducerLike, topic: str, timeout: float = 60.0) -> None:
    """:func:`connect`, then ``init_transactions(timeout)``."""
    connect(producer, topic)
    producer.init_transactions(timeout)
