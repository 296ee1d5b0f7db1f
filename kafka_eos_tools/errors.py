"""The tooling's errors, in the product's exception tree (so the command line prints them
as one line, as the product's own)."""

from __future__ import annotations

from kafka_eos_ds.errors import KafkaEosError


class BrokerError(KafkaEosError):
    """The embedded Kafka (or another test server) could not be fetched, started, reached
    or stopped."""


__all__ = ["BrokerError"]
