"""The one client-error boundary (kafka_eos_ds/kafka/errors.py): every error of the two
client libraries becomes the intended project error with the intended ``retriable``, an
authentication or TLS failure is never reported as "cannot reach", and anything that is
not a client error propagates as itself.

The tables below are the intended mapping, written independently of the code; the tests
run every librdkafka error code, every kafka-python exception class and every built-in
exception through the boundary and compare."""

from __future__ import annotations

import builtins
import inspect
import socket
import ssl
import time
from types import SimpleNamespace

import kafka.errors as kerrors
import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_eos_ds import errors as project_errors
from kafka_eos_ds.errors import ConfigError, KafkaClientError, KafkaEosError, TransactionFencedError
from kafka_eos_ds.kafka.errors import (
    TRANSIENT_BROKER_CODES,
    AuthWatch,
    client_error,
    mapping_client_errors,
    producer_error,
)
from kafka_eos_ds.kafka.settings import ClientParams, client_config

CONF = {"bootstrap.servers": "h:1"}


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

    from kafka_eos_ds.kafka.metadata import cluster_metadata

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

    settings = ClientParams({"bootstrap.servers": f"127.0.0.1:{server.getsockname()[1]}", "security.protocol": "SSL"})

    try:
        with pytest.raises(KafkaClientError) as failure:
            cluster_metadata(settings, timeout_s=3)
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

    return TransactionCoordinator(CONF, admin_factory=lambda **settings: admin,
                                  channel_factory=lambda client: channel)


def test_an_unexpected_error_in_a_coordinator_call_is_not_made_retriable():
    """Any exception of a coordinator call once became a retriable KafkaClientError, which
    the committer retried for commitTimeoutMs; a defect must fail at once, as itself."""
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


# -- every client error, enumerated ------------------------------------------------------------

LIBRDKAFKA_CODES = {name: getattr(KafkaError, name) for name in dir(KafkaError)
                    if not name.startswith("__") and isinstance(getattr(KafkaError, name), int)}
FLAGS = [(retriable, abortable) for retriable in (False, True) for abortable in (False, True)]


# What the message of a librdkafka error says when the error is one of these, by name.
EXPLAINED = {"_AUTHENTICATION": "authentication failed: check kafka.sasl.jaas.config",
             "SASL_AUTHENTICATION_FAILED": "authentication failed: check kafka.sasl.jaas.config",
             "_SSL": "the TLS handshake failed: check kafka.ssl.truststore",
             **{name: "not authorized: the principal lacks an ACL" for name in LIBRDKAFKA_CODES
                if name.endswith("_AUTHORIZATION_FAILED")}}
UNREACHABLE = ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_RESOLVE")


def intended(name: str, retriable: bool, abortable: bool) -> tuple[str, bool]:
    """What the message of a librdkafka error named ``name`` says, and whether it is retriable."""
    if name in EXPLAINED:
        return EXPLAINED[name], False
    if name in UNREACHABLE:
        return "cannot reach Kafka at h:1", True
    # An abortable transaction can run again; a leader or coordinator moving is asked again.
    return "the broker's reason", retriable or abortable or LIBRDKAFKA_CODES[name] in TRANSIENT_BROKER_CODES


def intended_for_a_producer(name: str, retriable: bool, abortable: bool) -> tuple[type, str, bool]:
    """The same for a task's producer, which acts on a few codes itself."""
    if name in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"):
        return TransactionFencedError, "A newer producer took over", False
    if name == "INVALID_TRANSACTION_TIMEOUT":
        return ConfigError, "set the sink option 'kafka.transaction.timeout.ms'", False
    if name in ("MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"):
        return KafkaClientError, "'max.message.bytes'", False
    if name in ("_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION"):
        return ConfigError, "does not exist; create it first", False
    if name == "TOPIC_AUTHORIZATION_FAILED":
        return KafkaClientError, "grant the principal WRITE and DESCRIBE", False
    text, again = intended(name, retriable, abortable)
    return KafkaClientError, text, again


def described(error: BaseException) -> tuple[type, bool]:
    return type(error), bool(getattr(error, "retriable", False))


def _says(error: BaseException, what: str, text: str) -> bool:
    return str(error).startswith(f"{what}: ") and text in str(error)


def test_every_librdkafka_error_is_mapped():
    wrong = []
    for name, code in LIBRDKAFKA_CODES.items():
        for retriable, abortable in FLAGS:
            err = KafkaError(code, "the broker's reason", retriable=retriable, txn_requires_abort=abortable)
            text, again = intended(name, retriable, abortable)
            raised = mapped(KafkaException(err), conf=CONF)
            handed = client_error("list topics", err, CONF)  # an error event or a delivery report
            for error in (raised, handed):
                if described(error) != (KafkaClientError, again) or not _says(error, "list topics", text):
                    wrong.append((name, retriable, abortable, str(error)))
    assert wrong == []


def test_every_librdkafka_error_of_a_task_producer_is_mapped():
    wrong = []
    for name, code in LIBRDKAFKA_CODES.items():
        for retriable, abortable in FLAGS:
            err = KafkaError(code, "the broker's reason", retriable=retriable, txn_requires_abort=abortable)
            kind, text, again = intended_for_a_producer(name, retriable, abortable)
            for undelivered in (0, 3):  # a call raised it, or the first of 3 failed delivery reports
                error = producer_error(err, CONF, topic="out", undelivered=undelivered)
                if described(error) != (kind, again) or text not in str(error):
                    wrong.append((name, retriable, abortable, undelivered, str(error)))
    assert wrong == []


def test_a_leader_moving_is_retriable_though_librdkafka_does_not_flag_it():
    # As a watermark query raises it when it reached a broker that no longer leads the
    # partition (a broker bounce): it once failed a query's planner step for good.
    err = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "Failed to get watermark offsets: Broker: Not leader")
    assert not err.retriable()
    error = mapped(KafkaException(err), conf=CONF)
    assert described(error) == (KafkaClientError, True) and "Not leader" in str(error)
    for code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.INVALID_CONFIG):  # not transient: said at once
        assert not mapped(KafkaException(KafkaError(code)), conf=CONF).retriable


def test_records_purged_with_their_failed_transaction_carry_its_cause():
    for name in ("_PURGE_QUEUE", "_PURGE_INFLIGHT"):
        purged = KafkaError(LIBRDKAFKA_CODES[name])
        error = producer_error(purged, CONF, topic="out", undelivered=5, txn_failure="Broker: boom")
        assert described(error) == (KafkaClientError, True) and "the transaction failed: Broker: boom" in str(error)
        denied = producer_error(purged, CONF, topic="out", undelivered=5,
                                txn_failure="Failed to add partition(s): Broker: Topic authorization failed")
        assert described(denied) == (KafkaClientError, False) and "grant the principal WRITE" in str(denied)


def test_the_auth_watch_keeps_exactly_the_errors_that_explain_a_failed_call():
    for name, code in LIBRDKAFKA_CODES.items():
        watch = AuthWatch()
        watch(KafkaError(code, "the broker's reason"))
        assert (watch.error is not None) is (name in EXPLAINED), name
        timed_out = KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out"))
        text = EXPLAINED.get(name, "cannot reach Kafka at h:1")
        assert _says(mapped(timed_out, conf=CONF, watch=watch), "list topics", text), name
    for reason in ("SSL handshake failed", "certificate verify failed"):  # how librdkafka reports a bad handshake
        error = mapped(KafkaException(KafkaError(KafkaError._TRANSPORT, f"...: {reason}")), conf=CONF)
        assert described(error) == (KafkaClientError, False) and "TLS handshake failed" in str(error)


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def _instance(cls: type) -> BaseException:
    required = [p for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
                if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    return cls(*(["boom"] * len(required))) if required else cls("boom")


def intended_for_kafka_python(cls: type) -> tuple[str, bool]:
    if issubclass(cls, kerrors.SaslAuthenticationFailedError):
        return "authentication failed: check kafka.sasl.jaas.config", False
    if issubclass(cls, kerrors.AuthorizationError):
        return "not authorized: the principal lacks an ACL", False
    if issubclass(cls, (kerrors.KafkaConnectionError, kerrors.KafkaTimeoutError)):
        return "cannot reach Kafka at h:1", True
    return cls.__name__, cls.retriable  # kafka-python's own verdict


def test_every_kafka_python_error_is_mapped():
    classes = {kerrors.KafkaError} | _subclasses(kerrors.KafkaError)
    assert len(classes) > 100
    wrong = []
    for cls in classes:
        text, again = intended_for_kafka_python(cls)
        error = mapped(_instance(cls), "connect", CONF)
        if described(error) != (KafkaClientError, again) or not _says(error, "connect", text):
            wrong.append((cls.__name__, str(error)))
    assert wrong == []


def test_every_socket_and_tls_error_under_kafka_python_is_mapped():
    classes = {c for module in (builtins, socket, ssl) for c in vars(module).values()
               if isinstance(c, type) and issubclass(c, OSError)}
    assert ssl.SSLCertVerificationError in classes and ConnectionRefusedError in classes
    for cls in classes:
        error = mapped(cls(111, "boom"), "connect", CONF)
        if issubclass(cls, ssl.SSLError):
            assert described(error) == (KafkaClientError, False) and "TLS handshake failed" in str(error), cls
        else:
            assert described(error) == (KafkaClientError, True) and "cannot reach Kafka at h:1" in str(error), cls


_ARGS = {"UnicodeDecodeError": ("utf-8", b"\xff", 0, 1, "bad"), "UnicodeEncodeError": ("ascii", "\xe9", 0, 1, "bad"),
         "UnicodeTranslateError": ("\xe9", 0, 1, "bad"), "ExceptionGroup": ("boom", [ValueError("boom")]),
         "BaseExceptionGroup": ("boom", [ValueError("boom")])}


def test_anything_that_is_not_a_client_error_propagates_as_itself():
    """Not retriable: nothing retries an exception outside the project's tree."""
    classes = [c for c in vars(builtins).values()
               if isinstance(c, type) and issubclass(c, BaseException) and not issubclass(c, OSError)]
    assert len(classes) > 40
    for cls in classes:
        exc = cls(*_ARGS.get(cls.__name__, ("boom",)))
        with pytest.raises(cls) as info, mapping_client_errors("list topics", CONF):
            raise exc
        assert info.value is exc and not isinstance(info.value, KafkaEosError), cls
        assert client_error("list topics", exc, CONF) is exc


def test_the_projects_own_errors_pass_unchanged():
    for cls in (getattr(project_errors, name) for name in project_errors.__all__):
        exc = cls("already ours", retriable=True)
        with pytest.raises(cls) as info, mapping_client_errors("list topics", CONF):
            raise exc
        assert info.value is exc and info.value.retriable


# -- every call of the transaction-coordinator client --------------------------------------------


class FailingAdmin:
    """kafka-python's admin client, every call of which raises ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise self.exc
        return call


COORDINATOR_CALLS = {
    "send_offsets": lambda co: co.send_offsets("etl-0-0", 7, 1, "g", {"t": {"0": 5}}),
    "commit_offsets": lambda co: co.commit_offsets("g", {"t": {"0": 5}}),
    "group_offsets": lambda co: co.group_offsets("g", {"t": ["0"]}),
    "end_txn": lambda co: co.end_txn("etl-0-0", 7, 1, commit=True),
    "describe": lambda co: co.describe("etl-0-0"),
    "describe_many": lambda co: co.describe_many(["etl-0-0", "etl-1-0"]),
    "list_transactions": lambda co: co.list_transactions("etl-.*"),
}
FAILURES = [(RuntimeError("a bug"), None), (kerrors.NodeNotReadyError("moving"), True),
            (kerrors.IllegalStateError("no"), False), (kerrors.TransactionalIdAuthorizationFailedError("no"), False)]


@pytest.mark.parametrize("call", COORDINATOR_CALLS)
@pytest.mark.parametrize("exc, retriable", FAILURES, ids=lambda v: type(v).__name__ if isinstance(v, Exception) else "")
def test_every_coordinator_call_maps_kafka_pythons_errors_and_lets_others_through(call, exc, retriable):
    co = coordinator_over(FailingChannel(exc), FailingAdmin(exc))
    if retriable is None:  # not a client error: as itself, not retriable
        with pytest.raises(type(exc)) as info:
            COORDINATOR_CALLS[call](co)
        assert info.value is exc
        return
    with pytest.raises(KafkaClientError) as failure:
        COORDINATOR_CALLS[call](co)
    assert failure.value.retriable is retriable and failure.value.__cause__ is exc


@pytest.mark.parametrize("exc, retriable", FAILURES, ids=lambda v: type(v).__name__ if isinstance(v, Exception) else "")
def test_connecting_the_coordinator_client_maps_its_errors(exc, retriable):
    from kafka_eos_ds.kafka.coordinator import TransactionCoordinator

    def admin(**settings):
        raise exc

    expected = type(exc) if retriable is None else KafkaClientError
    with pytest.raises(expected) as info:
        TransactionCoordinator(CONF, admin_factory=admin, channel_factory=FailingChannel)
    assert getattr(info.value, "retriable", False) is bool(retriable)
    assert retriable is None or "connect the transaction-coordinator client" in str(info.value)


def test_an_id_the_coordinator_does_not_know_is_no_error():
    co = coordinator_over(FailingChannel(RuntimeError()), FailingAdmin(kerrors.TransactionalIdNotFoundError()))
    assert co.describe("etl-0-0") is None
    assert co.describe_many(["etl-0-0", "etl-1-0"]) == {"etl-0-0": None, "etl-1-0": None}


def test_fencing_stops_at_once_on_an_unexpected_error():
    """Fencing retries client errors until its deadline; a defect ends it at once."""
    co = coordinator_over(FailingChannel(RuntimeError("a bug")))
    started = time.monotonic()
    with pytest.raises(RuntimeError):
        co.fence("etl-0-0", 60_000, timeout_s=30)
    assert time.monotonic() - started < 5


def test_every_error_code_in_a_coordinators_answer_is_sorted():
    """Broker answers (not client errors): retried only while the coordinator moves, loads,
    is busy finishing a transaction or timed out."""
    again = {kerrors.RequestTimedOutError.errno, kerrors.CoordinatorLoadInProgressError.errno,
             kerrors.CoordinatorNotAvailableError.errno, kerrors.NotCoordinatorError.errno,
             kerrors.ConcurrentTransactionsError.errno}

    class Answering(FailingChannel):
        def send(self, key, request, *, group):
            return SimpleNamespace(error_code=self.exc, topics=[])

    codes = {code: cls for code, cls in kerrors.kafka_errors.items() if code is not None}  # None: the base class
    assert len(codes) > 100
    for code, cls in codes.items():
        co = coordinator_over(Answering(code))
        if code == 0:
            co.send_offsets("etl-0-0", 7, 1, "g", {})
            continue
        with pytest.raises(KafkaClientError) as failure:
            co.send_offsets("etl-0-0", 7, 1, "g", {})
        assert failure.value.retriable is (code in again) and cls.__name__ in str(failure.value), code
