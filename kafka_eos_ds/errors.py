"""The one exception tree of kafka_eos.

::

    KafkaEosError                      base of everything this package raises; .retriable
    ├── ConfigError (ValueError)       bad option / column; raised before any write
    ├── KafkaClientError               a Kafka client call failed (wraps the client's error)
    ├── TransactionError               a two-phase-commit participant is not in the state
    │   │                              the protocol needs (any sink, not only Kafka)
    │   ├── TransactionFencedError     a newer writer owns the participant; this one is a zombie
    │   └── TransactionLostError       a decided participant was aborted (e.g. by timeout)
    ├── DataLossError                  offsets vanished (retention, deleted topic) and
    │                                  failOnDataLoss is true
    └── StorageError                   a file-system or metastore call failed (HDFS, S3,
                                       the Hive metastore; wraps the client's error)

``retriable`` says whether trying the same call again may help (a coordinator moving, a
broker restarting); the two-phase committer retries exactly those errors.

Lower-level errors (confluent_kafka.KafkaException, kafka.errors.KafkaError, OSError
from subprocess, botocore's ClientError, hdfs-native's and Thrift's errors) are
translated into this tree at one boundary each, with ``raise ... from exc`` so the
original stays attached.
"""

from __future__ import annotations


class KafkaEosError(Exception):
    """Base class of every error raised by kafka_eos.

    Attributes
    ----------
    retriable : bool
        Whether trying the same call again may succeed (default False).
    """

    def __init__(self, message: str = "", *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class ConfigError(KafkaEosError, ValueError):
    """An option or input column is wrong. The message names it and the fix."""


class KafkaClientError(KafkaEosError):
    """A call to Kafka failed; ``retriable`` says whether trying again may help, ``code``
    is the broker's error code when the broker answered with one."""

    def __init__(self, message: str = "", *, retriable: bool = False, code: int | None = None) -> None:
        super().__init__(message, retriable=retriable)
        self.code = code


class TransactionError(KafkaEosError):
    """A participant of the two-phase commit is not in the state the protocol needs."""


class TransactionFencedError(TransactionError):
    """A newer writer (for Kafka: a higher producer epoch) owns the participant's id."""


class TransactionLostError(TransactionError):
    """A participant that the driver decided to commit was aborted instead."""


class TransactionOutcomeUnknownError(TransactionError):
    """Whether a participant the driver decided to commit committed can no longer be told
    (the coordinator's evidence is gone): never guessed, the operator checks the output."""


class DataLossError(KafkaEosError):
    """Offsets the query needs are gone and ``failOnDataLoss`` is true."""


class StorageError(KafkaEosError):
    """A call to a file system or the metastore failed; ``retriable`` says whether trying
    again may help (a NameNode failing over, a throttled S3 request)."""


__all__ = [
    "KafkaEosError",
    "ConfigError",
    "KafkaClientError",
    "TransactionError",
    "TransactionFencedError",
    "TransactionLostError",
    "TransactionOutcomeUnknownError",
    "DataLossError",
    "StorageError",
]
