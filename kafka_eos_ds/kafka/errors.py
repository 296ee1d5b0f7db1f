"""Client errors become the project's errors here, and nowhere else.

Every client call whose failure the project reports runs inside
:func:`mapping_client_errors` (or, where only a librdkafka error is caught, hands it to
:func:`client_error`, which also takes an error a client hands over as a value: an error
event from ``consume()``); a transactional producer's errors go through
:func:`producer_error`, which first sorts out what a task can act on. So a failure reads
the same whichever client met it, an authentication failure never reads "cannot reach
Kafka", and ``retriable`` means one thing everywhere:

==================================================  =============================  =========
client error                                         KafkaClientError says          retriable
==================================================  =============================  =========
librdkafka ``_AUTHENTICATION``,                      authentication failed: check   no
``SASL_AUTHENTICATION_FAILED``; kafka-python         the SASL settings
``SaslAuthenticationFailedError``
librdkafka ``_SSL``, a ``_TRANSPORT`` naming a       the TLS handshake failed:      no
failed handshake; ``ssl.SSLError``                   check the trust/key stores
librdkafka ``*_AUTHORIZATION_FAILED``; kafka-python  not authorized: an ACL is      no
``AuthorizationError``                               missing
librdkafka ``_TRANSPORT``, ``_ALL_BROKERS_DOWN``,    cannot reach Kafka at ...      yes
``_TIMED_OUT``, ``_RESOLVE``; kafka-python
``KafkaConnectionError``, ``KafkaTimeoutError``;
``OSError``
a broker's answer that Kafka calls retriable:        its text                       yes
a leader or coordinator moving or loading,
too few in-sync replicas, a request timed out
(:data:`TRANSIENT_BROKER_CODES`)
any other librdkafka error                           its text                       as librdkafka says
                                                                                    (retriable or abortable)
any other kafka-python ``KafkaError``                its text                       its class's ``retriable``
==================================================  =============================  =========

A project error passes unchanged. Anything else is not a client error but a defect (or a
condition nobody anticipated): it propagates as it is and is never retried.

:func:`producer_error` first gives these their own error: a fenced producer
(``_FENCED``, ``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``) a TransactionFencedError;
the broker refusing ``transaction.timeout.ms`` and a topic or partition that does not
exist a ConfigError naming the option; a record over the size limit and a topic the
principal may not write to a KafkaClientError naming the settings (not retriable); records
purged because their transaction failed the cause librdkafka logged (retriable).

Error codes in a broker's *answer* (EndTxn, InitProducerId, ...) are not client errors:
:mod:`.coordinator` and :mod:`kafka_eos_ds.kafka_sink.commit_outcome` sort them.

librdkafka reports a failed SASL or TLS handshake to the client's error callback, while
the call itself only times out or fails to connect; a client whose calls should name the
real cause gets an :class:`AuthWatch` as its ``error_cb`` and hands the same watch to the
mapping.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Any, Iterator, Mapping

from kafka_eos_ds.errors import ConfigError, KafkaClientError, KafkaEosError, TransactionFencedError
from kafka_eos_ds.kafka.settings import hide_values

__all__ = ["AuthWatch", "client_error", "mapping_client_errors", "producer_error"]

_FIX = {
    "authentication": "authentication failed: check kafka.sasl.jaas.config (or kafka.sasl.username/password, "
                      "kafka.sasl.mechanism) and kafka.security.protocol",
    "tls": "the TLS handshake failed: check kafka.ssl.truststore.* (or kafka.ssl.ca.location), the client "
           "certificate (kafka.ssl.keystore.*) and kafka.ssl.endpoint.identification.algorithm",
    "authorization": "not authorized: the principal lacks an ACL for this operation (topic, group, "
                     "transactional id or cluster)",
}


class AuthWatch:
    """A librdkafka client's error callback (its ``error_cb``): keeps the last
    authentication or TLS error, which a call of that client reports only as a transport
    failure or a timeout."""

    def __init__(self) -> None:
        self.error: Any = None

    def __call__(self, err: Any) -> None:
        if _librdkafka_kind(err) is not None:
            self.error = err


@contextlib.contextmanager
def mapping_client_errors(what: str, conf: Mapping[str, Any] | None = None, *, watch: AuthWatch | None = None,
                          client: Any = None, fix: str | None = None) -> Iterator[None]:
    """Run a client call (confluent-kafka or kafka-python); its error is raised as the
    project's error ``"{what}: {cause}"``, from the original.

    ``conf`` (the client's settings) gives the servers to name and the secrets to hide;
    ``watch`` is the client's :class:`AuthWatch`; ``client`` (a producer or admin client)
    is polled once first, because librdkafka hands the error that explains a failed call
    to the error callback only when the client is polled; ``fix`` ends the message.
    """
    try:
        yield
    except Exception as exc:
        mapped = client_error(what, exc, conf, watch=watch, client=client, fix=fix)
        if mapped is exc:
            raise
        raise mapped from exc


def client_error(what: str, error: Any, conf: Mapping[str, Any] | None = None, *,
                 watch: AuthWatch | None = None, client: Any = None, fix: str | None = None) -> BaseException:
    """The project's error for ``error``: a client library's exception, or a librdkafka
    error handed over as a value (a ``confluent_kafka.KafkaError``). A project error, and
    an exception that is not a client error, is returned as it is. The arguments are
    those of :func:`mapping_client_errors`."""
    from confluent_kafka import KafkaException

    exc = error if isinstance(error, BaseException) else KafkaException(error)
    if isinstance(exc, KafkaEosError) or not isinstance(exc, Exception):
        return exc
    return _mapped(what, exc, conf or {}, watch, client, fix) or exc


def producer_error(err: Any, conf: Mapping[str, Any], *, topic: str | None = None, undelivered: int = 0,
                   txn_failure: str | None = None, watch: AuthWatch | None = None,
                   client: Any = None) -> BaseException:
    """The project's error for ``err`` (a ``confluent_kafka.KafkaError``) met by a task's
    producer (settings ``conf``): raised by one of its calls (on ``topic`` if a record's),
    or, with ``undelivered``, the first of that many failed delivery reports.
    ``txn_failure`` is librdkafka's log line that says why the transaction failed."""
    from confluent_kafka import KafkaError

    code = err.code() if hasattr(err, "code") else None
    if code in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT) and txn_failure:
        # Records are reported only as purged when their transaction failed; the log line has the cause.
        if "TOPIC_AUTHORIZATION_FAILED" in txn_failure or "Topic authorization failed" in txn_failure:
            code = KafkaError.TOPIC_AUTHORIZATION_FAILED
        else:
            return KafkaClientError(f"{undelivered} record(s) were not delivered to Kafka: the transaction failed: "
                                    f"{txn_failure}", retriable=True)
    if code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        return ConfigError(f"The broker refused transaction.timeout.ms={conf.get('transaction.timeout.ms')}: set "
                           "the sink option 'kafka.transaction.timeout.ms' at or below the broker's "
                           "'transaction.max.timeout.ms' (default 900000).")
    if code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
        return TransactionFencedError(f"A newer producer took over this task's transactional id: {err}")
    if code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
        return KafkaClientError(f"A record is larger than Kafka accepts for topic {topic!r}: raise the topic's "
                                "'max.message.bytes' (broker 'message.max.bytes') and the sink option "
                                "'kafka.message.max.bytes' together, or write smaller records.")
    if code in (KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
        return ConfigError(f"Topic {topic!r} (or the requested partition) does not exist; create it first "
                           "(option 'topic' / columns 'topic', 'partition').")
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return KafkaClientError(f"Not authorized to write to topic {topic!r} (TOPIC_AUTHORIZATION_FAILED): grant the "
                                "principal WRITE and DESCRIBE on it (Kafka ACLs).", retriable=False)
    what = f"{undelivered} record(s) were not delivered to Kafka; first error" if undelivered else "Kafka producer"
    return client_error(what, err, conf, watch=watch, client=client)


# Error codes of a broker's answer that say "ask again shortly" (Kafka's RetriableException
# kinds): librdkafka flags them retriable only where it would retry itself, and not at all
# in the answer to some calls (a watermark query that reached a broker which no longer
# leads the partition reports NOT_LEADER_FOR_PARTITION unflagged). Missing topics and
# partitions are not among them: the project reports those as configuration errors.
TRANSIENT_BROKER_CODES = frozenset({
    5,   # LEADER_NOT_AVAILABLE
    6,   # NOT_LEADER_FOR_PARTITION
    7,   # REQUEST_TIMED_OUT
    13,  # NETWORK_EXCEPTION
    14,  # COORDINATOR_LOAD_IN_PROGRESS
    15,  # COORDINATOR_NOT_AVAILABLE
    16,  # NOT_COORDINATOR
    19,  # NOT_ENOUGH_REPLICAS
    20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
    78,  # OFFSET_NOT_AVAILABLE
})


def _mapped(what: str, exc: Exception, conf: Mapping[str, Any], watch: AuthWatch | None, client: Any,
            fix: str | None) -> KafkaEosError | None:
    from confluent_kafka import KafkaError, KafkaException

    librdkafka = isinstance(exc, KafkaException)
    if not librdkafka and not _is_kafka_python_error(exc):
        return None
    _serve_callbacks(client)
    err: Any = exc.args[0] if librdkafka and exc.args and isinstance(exc.args[0], KafkaError) else None
    kind = _librdkafka_kind(err) if err is not None else _kafka_python_kind(exc)
    if kind is None and watch is not None and watch.error is not None:
        kind, err = _librdkafka_kind(watch.error), watch.error
    detail = hide_values(str(err if err is not None else exc), conf)
    servers = conf.get("bootstrap.servers") or conf.get("bootstrap_servers")
    end = f". {fix}" if fix else ""
    if kind is not None:
        return KafkaClientError(f"{what}: {_FIX[kind]} ({detail}){end}", retriable=False)
    if (err is not None and _unreachable(err)) or (not librdkafka and _kafka_python_unreachable(exc)):
        return KafkaClientError(f"{what}: cannot reach Kafka at {servers} ({detail}){end}", retriable=True)
    if err is not None:
        # An abortable transaction error: the transaction can be aborted and run again.
        retriable = bool(err.retriable() or err.txn_requires_abort() or err.code() in TRANSIENT_BROKER_CODES)
    else:  # kafka-python's own classification (a KafkaException without an error: no)
        retriable = bool(getattr(exc, "retriable", False)) and not librdkafka
    return KafkaClientError(f"{what}: {detail}{end}", retriable=retriable)


def _serve_callbacks(client: Any) -> None:
    if client is None or not hasattr(client, "poll"):
        return
    try:
        client.poll(0)
    except Exception:  # the explanation is optional; the call's own error stands
        pass


# -- librdkafka (confluent_kafka.KafkaError) ------------------------------------------------


def _librdkafka_kind(err: Any) -> str | None:
    """'authentication', 'authorization', 'tls' or None for a confluent KafkaError."""
    from confluent_kafka import KafkaError

    code = err.code() if hasattr(err, "code") else None
    text = err.str() if hasattr(err, "str") else ""
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return "authentication"
    # A failed TLS handshake reaches the error callback as a transport error.
    if code == KafkaError._SSL or (code == KafkaError._TRANSPORT and ("SSL handshake failed" in text
                                                                       or "certificate verify failed" in text)):
        return "tls"
    if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                KafkaError.DELEGATION_TOKEN_AUTHORIZATION_FAILED):
        return "authorization"
    return None


def _unreachable(err: Any) -> bool:
    from confluent_kafka import KafkaError

    return err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                          KafkaError._RESOLVE)


# -- kafka-python (kafka.errors) and the sockets under it -------------------------------------


def _is_kafka_python_error(exc: BaseException) -> bool:
    import kafka.errors as kerrors

    return isinstance(exc, (kerrors.KafkaError, OSError))


def _kafka_python_kind(exc: BaseException) -> str | None:
    import kafka.errors as kerrors

    if isinstance(exc, ssl.SSLError):
        return "tls"
    if isinstance(exc, kerrors.SaslAuthenticationFailedError):
        return "authentication"
    if isinstance(exc, kerrors.AuthorizationError):
        return "authorization"
    return None


def _kafka_python_unreachable(exc: BaseException) -> bool:
    import kafka.errors as kerrors

    return isinstance(exc, (kerrors.KafkaConnectionError, kerrors.KafkaTimeoutError, OSError))
