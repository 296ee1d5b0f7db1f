"""The one exception tree of kafka_eos.

::

    KafkaEosError                      base of everything this package raises
    ├── ConfigError (ValueError)       bad option / column; raised before any write
    ├── BrokerError                    embedded-broker lifecycle (java, mvn, ports, readiness)
    ├── KafkaClientError               a Kafka client call failed (wraps the client's error)
    │   └── TransactionError           a transaction's outcome is not what the protocol needs
    │       ├── TransactionFencedError     a newer producer owns the transactional id
    │       └── TransactionLostError       a decided transaction was aborted (e.g. by timeout)
    └── DataLossError                  offsets vanished (retention, deleted topic) and
                                       failOnDataLoss is true

Lower-level errors (confluent_kafka.KafkaException, kafka.errors.KafkaError, OSError
from subprocess) are translated into this tree at one boundary each, with ``raise ...
from exc`` so the original stays attached.
"""

from __future__ import annotations


class KafkaEosError(Exception):
    """Base class of every error raised by kafka_eos."""


class ConfigError(KafkaEosError, ValueError):
    """An option or input column is wrong. The message names it and the fix."""


class BrokerError(KafkaEosError):
    """The embedded Kafka could not be fetched, started, reached or stopped."""


class KafkaClientError(KafkaEosError):
    """A call to Kafka failed; ``retriable`` says whether trying again may help."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class TransactionError(KafkaClientError):
    """A transaction is not in the state the two-phase-commit protocol needs."""


class TransactionFencedError(TransactionError):
    """A newer producer (higher epoch) owns the transactional id; this one is a zombie."""


class TransactionLostError(TransactionError):
    """A transaction that the driver decided to commit was aborted instead."""


class DataLossError(KafkaEosError):
    """Offsets the query needs are gone and ``failOnDataLoss`` is true."""


__all__ = [
    "KafkaEosError",
    "ConfigError",
    "BrokerError",
    "KafkaClientError",
    "TransactionError",
    "TransactionFencedError",
    "TransactionLostError",
    "DataLossError",
]
