"""Client errors become the project's errors here, and nowhere else.

Every client call whose failure the project reports runs inside
:func:`mapping_client_errors`; an error a client hands over as a value (a failed delivery
report, an error event from ``consume()``) goes through :func:`client_error`. So a
failure reads the same whichever client met it, an authentication failure never reads
"cannot reach Kafka", and ``retriable`` means one thing everywhere:

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
any other librdkafka error                           its text                       as librdkafka says
                                                                                    (retriable or abortable)
any other kafka-python ``KafkaError``                its text                       its class's ``retriable``
==================================================  =============================  =========

A project error passes unchanged. Anything else is not a client error but a defect (or a
condition nobody anticipated): it propagates as it is and is never retried.

librdkafka reports a failed SASL or TLS handshake to the client's error callback, while
the call itself only times out or fails to connect; a client whose calls should name the
real cause gets an :class:`AuthWatch` as its ``error_cb`` and hands the same watch to the
mapping.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Any, Iterator, Mapping, Optional

from kafka_eos_ds.errors import KafkaClientError, KafkaEosError
from kafka_eos_ds.kafka.settings import hide_values

__all__ = ["AuthWatch", "client_error", "mapping_client_errors"]

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
def mapping_client_errors(what: str, conf: Optional[Mapping[str, Any]] = None, *, watch: Optional[AuthWatch] = None,
                          client: Any = None, fix: Optional[str] = None) -> Iterator[None]:
    """Run a client call (confluent-kafka or kafka-python); its error is raised as the
    project's error ``"{what}: {cause}"``, from the original.

    ``conf`` (the client's settings) gives the servers to name and the secrets to hide;
    ``watch`` is the client's :class:`AuthWatch`; ``client`` (a producer or admin client)
    is polled once first, because librdkafka hands the error that explains a failed call
    to the error callback only when the client is polled; ``fix`` ends the message.
    """
    try:
        yield
    except KafkaEosError:
        raise
    except Exception as exc:
        mapped = _mapped(what, exc, conf or {}, watch, client, fix)
        if mapped is None:
            raise
        raise mapped from exc


def client_error(what: str, err: Any, conf: Optional[Mapping[str, Any]] = None, *,
                 watch: Optional[AuthWatch] = None, client: Any = None, fix: Optional[str] = None) -> KafkaEosError:
    """The project's error for ``err``, a librdkafka error handed over as a value (a
    ``confluent_kafka.KafkaError`` of a delivery report or a consumed event)."""
    from confluent_kafka import KafkaException

    mapped = _mapped(what, KafkaException(err), conf or {}, watch, client, fix)
    assert mapped is not None  # a KafkaException is always a client error
    return mapped


def _mapped(what: str, exc: Exception, conf: Mapping[str, Any], watch: Optional[AuthWatch], client: Any,
            fix: Optional[str]) -> Optional[KafkaEosError]:
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
        retriable = bool(err.retriable() or err.txn_requires_abort())
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


def _librdkafka_kind(err: Any) -> Optional[str]:
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


def _kafka_python_kind(exc: BaseException) -> Optional[str]:
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
