"""Kept for imports written before :mod:`.client_settings` (the one client boundary)."""

from kafka_eos_ds.kafka.client_settings import (
    LIBRDKAFKA_LOGGER,
    is_secret,
    logged,
    redact,
    short_lived,
    to_kafka_python,
)

__all__ = ["LIBRDKAFKA_LOGGER", "is_secret", "logged", "redact", "short_lived", "to_kafka_python"]
