"""The secured embedded clusters themselves, through plain confluent-kafka clients.

Good credentials produce, consume and commit transactions; bad ones are refused; an
authenticated user without ACLs is denied. The Java-form option maps the clusters hand
out are checked with Spark's built-in connector in test_security.py.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from integration.secured import start_secured
from kafka_eos_tools.topics import consume_all, create_topic, unique_name

# The secured brokers themselves, checked with plain librdkafka clients: the pipeline tests
# (test_security.py) start every mode and run the product on it; these run in the full
# profile (integration/conftest.py).
pytestmark = pytest.mark.full


@pytest.fixture(scope="module")
def sasl(tmp_path_factory):
    yield from start_secured(tmp_path_factory.mktemp("sasl-acls"), "sasl", acls=True)


@pytest.fixture(scope="module")
def ssl(tmp_path_factory):
    yield from start_secured(tmp_path_factory.mktemp("ssl"), "ssl")


@pytest.fixture(scope="module")
def mtls(tmp_path_factory):
    yield from start_secured(tmp_path_factory.mktemp("mtls"), "mtls")


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory):
    yield from start_secured(tmp_path_factory.mktemp("sasl-ssl"), "sasl_ssl")


def _topic(cluster) -> str:
    return create_topic(cluster.bootstrap, unique_name("sec"), 1, 1, client=cluster.admin_config())


def _commit(conf: dict, topic: str, txn_id: str, values: list) -> None:
    producer = Producer({**conf, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value)
    producer.commit_transaction(30)


def _committed(cluster, topic: str, conf: dict | None = None) -> list:
    return [r.value for r in consume_all(cluster.bootstrap, topic, client=conf or cluster.admin_config())]


def _refused(conf: dict) -> list[str]:
    """The client-level errors a client with ``conf`` gets; it must not see metadata."""
    errors: list = []
    admin = AdminClient({**conf, "error_cb": errors.append, "reconnect.backoff.max.ms": 500})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        admin.poll(0.5)
    assert errors, "the broker neither refused nor reported anything"
    return [str(e) for e in errors]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_user_with_acls_commits_transactions(sasl, mechanism):
    topic = _topic(sasl)
    prefix = unique_name("txn")
    sasl.create_acls("alice", read_topics=[topic], write_topics=[topic], transactional_id_prefix=prefix)
    alice = sasl.client_config("alice", mechanism)
    assert alice["sasl.mechanism"] == mechanism and alice["security.protocol"] == "SASL_PLAINTEXT"
    _commit(alice, topic, f"{prefix}-1", [b"a", b"b"])
    assert sorted(_committed(sasl, topic, alice)) == [b"a", b"b"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_wrong_password_is_refused(sasl, mechanism):
    conf = {**sasl.client_config("alice", mechanism), "sasl.password": "not-the-password"}
    errors = _refused(conf)
    assert any("Authentication failed" in e or "authentication" in e.lower() for e in errors), errors


def test_acls_deny_a_user_without_the_transactional_id_or_topic_write(sasl):
    topic = _topic(sasl)
    bob = sasl.client_config("bob")
    with pytest.raises(KafkaException, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED|ransactional.?[Ii]d auth"):
        _commit(bob, topic, unique_name("bob"), [b"x"])
    prefix = unique_name("bobtxn")
    sasl.create_acls("bob", read_topics=[topic], transactional_id_prefix=prefix)  # no WRITE on the topic
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED|[Tt]opic authorization"):
        _commit(bob, topic, f"{prefix}-1", [b"x"])
    assert _committed(sasl, topic) == []


def test_acls_are_enforced_for_the_admin_only_as_super_user(sasl):
    # No ACL at all for the topic: alice cannot even see it, the admin can.
    topic = _topic(sasl)
    alice_md = AdminClient(sasl.client_config("alice")).list_topics(timeout=10)
    assert topic not in alice_md.topics
    assert topic in AdminClient(sasl.admin_config()).list_topics(timeout=10).topics


def test_ssl_with_the_generated_ca_commits_and_without_it_is_refused(ssl):
    topic = _topic(ssl)
    conf = ssl.client_config("alice")
    assert conf["security.protocol"] == "SSL" and conf["ssl.ca.location"].endswith("ca.pem")
    _commit(conf, topic, unique_name("ssl"), [b"s"])
    assert _committed(ssl, topic, conf) == [b"s"]
    untrusted = {k: v for k, v in conf.items() if k != "ssl.ca.location"}
    errors = _refused({**untrusted, "ssl.ca.location": str(ssl.material.path("alice.pem"))})
    assert any("certificate verify failed" in e or "SSL" in e for e in errors), errors


@pytest.mark.parametrize("keystore", ["PKCS12", "PEM"])
def test_mtls_client_certificate_commits(mtls, keystore):
    topic = _topic(mtls)
    conf = mtls.client_config("alice", keystore=keystore)
    _commit(conf, topic, unique_name("mtls"), [b"m"])
    assert _committed(mtls, topic, conf) == [b"m"]


def test_mtls_without_a_client_certificate_is_refused(mtls):
    conf = {k: v for k, v in mtls.client_config("alice").items() if not k.startswith("ssl.keystore")}
    errors = _refused(conf)
    assert errors


def test_sasl_ssl_commits(sasl_ssl):
    topic = _topic(sasl_ssl)
    conf = sasl_ssl.client_config("alice", "SCRAM-SHA-256")
    assert conf["security.protocol"] == "SASL_SSL"
    _commit(conf, topic, unique_name("saslssl"), [b"t"])
    assert _committed(sasl_ssl, topic, conf) == [b"t"]


def test_the_client_listener_is_the_only_one_clients_learn(sasl):
    md = AdminClient(sasl.admin_config()).list_topics(timeout=10)
    assert {f"{b.host}:{b.port}" for b in md.brokers.values()} == {sasl.bootstrap}
