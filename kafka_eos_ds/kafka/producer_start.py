"""A transactional producer's start: a broker connection first, then ``init_transactions()``.

librdkafka looks the transaction coordinator up through any broker connection that is
up; right after ``Producer()`` none is, and the lookup then waits for a 500 ms retry
timer. Measured on the sink's decision writer, a new one in every driver step: about one
``init_transactions()`` in three took ~530 ms instead of ~30 ms (docs/dev/decisions.md, "Task
producer start"). Two metadata requests bring a connection up first: the first reaches
the bootstrap server, the second connects a broker it learned, which stays up.
"""

from __future__ import annotations

from kafka_eos_ds.kafka.clients import ProducerLike


def init_transactions(producer: ProducerLike, topic: str, timeout: float = 60.0) -> None:
    """Connect ``producer`` (metadata of ``topic``, a topic known to exist: a missing one
    could be auto-created), then ``init_transactions(timeout)``. The connecting is best
    effort: ``init_transactions()`` reports a cluster that does not answer."""
    from confluent_kafka import KafkaException

    try:
        for _ in range(2):
            producer.list_topics(topic, timeout=10)
    except KafkaException:
        pass
    producer.init_transactions(timeout)
