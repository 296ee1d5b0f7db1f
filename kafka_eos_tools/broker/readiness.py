""""Ready" means what the project needs: a transaction commits on a replicated topic."""

from __future__ import annotations

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_eos_ds.kafka.settings import logged
from kafka_eos_tools.errors import BrokerError

READY_TOPIC = "_kafka_eos_ready"


def check_transactional_write(bootstrap: str, replication: int, timeout: float = 30.0,
                              conf: dict | None = None) -> None:
    """``conf``: the admin's client settings on a secured cluster (they name the bootstrap)."""
    conf = {"bootstrap.servers": bootstrap, **(conf or {})}
    admin = AdminClient(logged(conf))
    futures = admin.create_topics([NewTopic(READY_TOPIC, 1, replication)], operation_timeout=timeout)
    try:
        futures[READY_TOPIC].result(timeout)
    except KafkaException as exc:
        if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise BrokerError(f"Creating the readiness topic failed: {exc}") from exc
    producer = Producer(logged({**conf, "transactional.id": "kafka-eos-readiness",
                                "transaction.timeout.ms": 60000}))
    try:
        producer.init_transactions(timeout)
        producer.begin_transaction()
        producer.produce(READY_TOPIC, value=b"ready")
        producer.commit_transaction(timeout)
    except KafkaException as exc:
        raise BrokerError(f"A transactional write to the embedded Kafka failed: {exc}") from exc
    finally:
        producer.flush(1)
