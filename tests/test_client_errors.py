"""The one client-error boundary (kafka_eos_ds/kafka/errors.py): what each client error
becomes, and that an authentication or TLS failure is never reported as "cannot reach"."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_eos_ds.errors import KafkaClientError, KafkaEosError
from kafka_eos_ds.kafka.errors import AuthWatch, mapping_client_errors
from kafka_eos_ds.kafka.settings import ClientParams, client_config


def mapped(exc: BaseException, what: str = "list topics", conf=None, **kwargs) -> KafkaEosError:
    """What ``exc``, raised by a client call, reaches the caller as."""
    with pytest.raises(KafkaEosError) as info, mapping_client_errors(what, conf, **kwargs):
        raise exc
    assert info.value.__cause__ is exc  # the client's own error stays attached
    return info.value


def test_authentication_failures_are_named_and_not_retriable():
    for code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        err = mapped(KafkaException(KafkaError(code, "SASL authentication error: bad")),
                     conf={"bootstrap.servers": "h:1"})
        assert isinstance(err, KafkaClientError) and not err.retriable
        assert "authentication failed: check kafka.sasl.jaas.config" in str(err)
        assert "reach" not in str(err)
    err = mapped(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), "x")
    assert "not authorized" in str(err) and not err.retriable


def test_a_timeout_after_an_authentication_error_reports_the_authentication_error():
    watch = AuthWatch()
    conf = client_config({"bootstrap.servers": "h:1"}, "sink_metadata", error_cb=watch)
    conf["error_cb"](KafkaError(KafkaError._AUTHENTICATION, "SASL SCRAM authentication failed"))  # librdkafka
    err = mapped(KafkaException(KafkaError(KafkaError._TRANSPORT, "transport")), conf=conf, watch=watch)
    assert "authentication failed" in str(err) and not err.retriable


def test_an_unreachable_cluster_is_retriable():
    err = mapped(KafkaException(KafkaError(KafkaError._TRANSPORT, "down")), conf={"bootstrap.servers": "h:1"})
    assert "cannot reach Kafka at h:1" in str(err) and err.retriable


def test_kafka_python_errors_are_translated():
    import kafka.errors as kerrors

    err = mapped(kerrors.SaslAuthenticationFailedError("bad"), "connect", {})
    assert "authentication failed" in str(err) and not err.retriable
    err = mapped(kerrors.KafkaConnectionError("refused"), "connect", {"bootstrap.servers": "h:1"})
    assert "cannot reach Kafka at h:1" in str(err) and err.retriable


def test_secrets_in_a_client_error_are_hidden():
    err = mapped(KafkaException(KafkaError(KafkaError._INVALID_ARG, "bad value hunter2")),
                 conf={"bootstrap.servers": "h:1", "sasl.password": "hunter2"})
    assert "hunter2" not in str(err) and "[redacted]" in str(err)


def test_a_tls_handshake_failure_is_reported_as_such_not_as_unreachable():
    """A TLS client against a listener that does not speak TLS: the driver's metadata call
    only times out, the reason reaches librdkafka's error callback."""
    import socket
    import threading

    from kafka_eos_ds.sink import driver

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(30)

    def answer_in_plain_text():
        try:
            while True:
                conn, _ = server.accept()
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 8)
                conn.close()
        except OSError:
            return  # the server socket was closed

    threading.Thread(target=answer_in_plain_text, daemon=True).start()

    class Config:
        producer = ClientParams({"bootstrap.servers": f"127.0.0.1:{server.getsockname()[1]}",
                                 "security.protocol": "SSL"})

    try:
        with pytest.raises(KafkaClientError) as failure:
            driver.cluster_metadata(Config())  # type: ignore[arg-type]
    finally:
        server.close()
    assert "TLS handshake failed" in str(failure.value) and "reach" not in str(failure.value)
    assert not failure.value.retriable


# -- the transaction-coordinator client (kafka-python) ---------------------------------------


class FailingChannel:
    """A coordinator channel whose every request raises ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.forgotten: list[str] = []

    def send(self, key, request, *, group):
        raise self.exc

    def forget(self, key, *, group):
        self.forgotten.append(key)

    def api_version(self, request_class):
        return -1


def coordinator_over(channel, admin=None):
    from kafka_eos_ds.kafka.coordinator import TransactionCoordinator

    return TransactionCoordinator({"bootstrap.servers": "h:1"}, admin_factory=lambda **settings: admin,
                                  channel_factory=lambda client: channel)


def test_an_unexpected_error_in_a_coordinator_call_is_not_made_retriable():
    """Any exception of a coordinator call once became a retriable KafkaClientError, which
    the committer retried for two minutes; a defect must fail at once, as itself."""
    import kafka.errors as kerrors

    bug = RuntimeError("a bug")
    channel = FailingChannel(bug)
    with pytest.raises(RuntimeError) as info:
        coordinator_over(channel).end_txn("etl-0-0", 7, 1, commit=True)
    assert info.value is bug and channel.forgotten == ["etl-0-0"]
    # kafka-python's own errors keep their class's verdict.
    for exc, retriable in ((kerrors.NodeNotReadyError("moving"), True), (kerrors.IllegalStateError("no"), False)):
        with pytest.raises(KafkaClientError) as failure:
            coordinator_over(FailingChannel(exc)).end_txn("etl-0-0", 7, 1, commit=True)
        assert failure.value.retriable is retriable and "Coordinator call for etl-0-0 failed" in str(failure.value)
