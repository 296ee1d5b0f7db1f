"""The embedded broker's configuration and planning, without starting a JVM."""

from __future__ import annotations

import socket

import pytest

from kafka_eos_tools.broker import distribution
from kafka_eos_tools.broker.cluster import EmbeddedKafka
from kafka_eos_tools.broker.node import Node, server_properties
from kafka_eos_tools.errors import BrokerError


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.strip().splitlines())


def test_three_node_cluster_replicates_everything_with_min_isr_two():
    node = Node(node_id=2, port=9000, controller_port=9100, directory="/tmp/n2")
    props = _props(server_properties(node, "1@127.0.0.1:9099,2@127.0.0.1:9100,3@127.0.0.1:9101", 3))
    assert props["default.replication.factor"] == "3"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["node.id"] == "2"


def test_every_listener_is_on_loopback():
    node = Node(node_id=1, port=9000, controller_port=9100, directory="/tmp/n1")
    props = _props(server_properties(node, "1@127.0.0.1:9100", 1))
    for key in ("listeners", "advertised.listeners", "controller.quorum.voters"):
        hosts = [part.split("//")[-1].split("@")[-1].rsplit(":", 1)[0] for part in props[key].split(",")]
        assert set(hosts) == {"127.0.0.1"}, key
    assert props["min.insync.replicas"] == "1"


def test_a_transaction_past_its_timeout_is_aborted_within_a_second():
    node = Node(node_id=1, port=9000, controller_port=9100, directory="/tmp/n1")
    props = _props(server_properties(node, "1@127.0.0.1:9100", 1))
    assert props["transaction.abort.timed.out.transaction.cleanup.interval.ms"] == "1000"


def test_versions_are_pinned():
    assert distribution.resolve_version(None).startswith("4.")
    assert distribution.resolve_version("3.9") == "3.9.1"
    assert distribution.resolve_version("4.1.1") == "4.1.1"
    with pytest.raises(BrokerError, match="not one of the pinned versions"):
        distribution.resolve_version("2.8")


def test_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        cluster = EmbeddedKafka(tmp_path, brokers=1, base_port=busy)
        with pytest.raises(BrokerError, match=f"Port\\(s\\) [0-9, ]*\\b{busy}\\b[0-9, ]* on 127.0.0.1 are in use"):
            cluster.start()


def test_missing_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    from kafka_eos_tools.broker.node import java_binary

    with pytest.raises(BrokerError, match="Java \\('java'\\) is not on PATH"):
        java_binary()


def test_missing_maven_is_a_clear_error(tmp_path, monkeypatch):
    from kafka_eos_tools.broker import maven

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("KAFKA_EOS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BrokerError, match="Maven \\('mvn'\\) is not on PATH"):
        maven.fetch(["org.example:nothing:1"], "x")


def test_stop_without_a_started_cluster_names_the_directory(tmp_path):
    with pytest.raises(BrokerError, match="No embedded Kafka was started in"):
        EmbeddedKafka.load(tmp_path)


# -- secured clusters ----------------------------------------------------------------
def _secured_props(tmp_path, security: str, acls: bool = False) -> tuple[dict[str, str], object]:
    from kafka_eos_tools.broker import security as sec

    mode = sec.parse_security(security)
    material = sec.Material(tmp_path / "security")
    material.generate(tls=False)  # passwords only; file paths are just named
    node = Node(node_id=1, port=9000, controller_port=9100, directory=str(tmp_path / "n1"), internal_port=9200)
    text = server_properties(node, "1@127.0.0.1:9100", 1, mode.protocol,
                             sec.listener_properties(mode, material, acls))
    return _props(text), material


def test_plaintext_cluster_config_has_no_secured_listener():
    node = Node(node_id=1, port=9000, controller_port=9100, directory="/tmp/n1")
    props = _props(server_properties(node, "1@127.0.0.1:9100", 1))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9000,CONTROLLER://127.0.0.1:9100"
    assert not any(k.startswith(("listener.name.", "ssl.", "sasl.", "authorizer")) for k in props)


def test_sasl_listener_enables_plain_and_scram_and_keeps_brokers_on_plaintext_loopback(tmp_path):
    props, material = _secured_props(tmp_path, "sasl")
    assert props["listeners"] == ("CLIENT://127.0.0.1:9000,INTERNAL://127.0.0.1:9200,"
                                  "CONTROLLER://127.0.0.1:9100")
    assert props["listener.security.protocol.map"] == "CLIENT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["listener.name.client.sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    plain = props["listener.name.client.plain.sasl.jaas.config"]
    assert plain.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ")
    assert f'user_alice="{material.password("alice")}"' in plain and plain.endswith(";")
    for mech in ("scram-sha-256", "scram-sha-512"):
        assert props[f"listener.name.client.{mech}.sasl.jaas.config"].startswith(
            "org.apache.kafka.common.security.scram.ScramLoginModule required")
    assert "authorizer.class.name" not in props


def test_tls_listeners_use_the_generated_stores_and_mtls_requires_client_certificates(tmp_path):
    ssl, material = _secured_props(tmp_path, "ssl")
    mtls, _ = _secured_props(tmp_path, "mtls")
    assert ssl["listener.security.protocol.map"].startswith("CLIENT:SSL,")
    assert ssl["listener.name.client.ssl.client.auth"] == "none"
    assert mtls["listener.name.client.ssl.client.auth"] == "required"
    assert mtls["listener.name.client.ssl.keystore.location"].endswith("security/broker.p12")
    assert mtls["listener.name.client.ssl.truststore.type"] == "PKCS12"
    assert mtls["listener.name.client.ssl.keystore.password"] == material.password("broker")
    assert mtls["ssl.principal.mapping.rules"].startswith("RULE:^CN=([^,]+),")
    sasl_ssl, _ = _secured_props(tmp_path, "sasl_ssl")
    assert sasl_ssl["listener.security.protocol.map"].startswith("CLIENT:SASL_SSL,")
    assert "listener.name.client.sasl.enabled.mechanisms" in sasl_ssl


def test_acls_turn_on_the_standard_authorizer_with_deny_by_default(tmp_path):
    props, _ = _secured_props(tmp_path, "sasl", acls=True)
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"].split(";") == ["User:admin", "User:ANONYMOUS"]
    for security in ("plaintext", "ssl"):
        with pytest.raises(BrokerError, match="ACLs need clients with names"):
            EmbeddedKafka(tmp_path / security, security=security, acls=True)


def test_unknown_security_is_a_clear_error(tmp_path):
    with pytest.raises(BrokerError, match="Unknown security 'kerberos'.*plaintext, sasl, ssl, mtls, sasl_ssl"):
        EmbeddedKafka(tmp_path, security="kerberos")


def test_passwords_are_random_per_cluster_private_and_never_in_a_repr(tmp_path):
    import os
    import stat

    from kafka_eos_tools.broker import security as sec

    first, second = sec.Material(tmp_path / "a"), sec.Material(tmp_path / "b")
    first.generate(tls=False)
    second.generate(tls=False)
    assert first.password("alice") != second.password("alice")
    assert len({first.password(u) for u in (*sec.USERS, "broker", "truststore")}) == len(sec.USERS) + 2
    assert stat.S_IMODE(os.stat(first.credentials_path).st_mode) == 0o600
    assert first.password("alice") not in repr(first)
    cluster = EmbeddedKafka(tmp_path / "c", security="sasl")
    cluster.material.generate(tls=False)
    assert cluster.material.password("alice") not in repr(cluster.material)
    with pytest.raises(BrokerError, match="No user 'mallory'"):
        first.password("mallory")


def test_scram_users_are_created_at_format_time_for_both_mechanisms(tmp_path):
    from kafka_eos_tools.broker import security as sec

    material = sec.Material(tmp_path)
    material.generate(tls=False)
    args = sec.scram_format_args(material)
    pairs = list(zip(args[::2], args[1::2], strict=True))
    assert all(flag == "--add-scram" for flag, _ in pairs)
    assert {value for _, value in pairs} == {
        f"{mech}=[name={user},password={material.password(user)}]"
        for user in sec.USERS for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512")}


def test_client_settings_in_librdkafka_and_java_form(tmp_path):
    cluster = EmbeddedKafka(tmp_path, security="sasl")
    cluster.nodes = [Node(node_id=1, port=9000, controller_port=9100, directory=str(tmp_path), internal_port=9200)]
    cluster.material.generate(tls=False)
    secret = cluster.material.password("alice")
    assert cluster.client_config("alice", "PLAIN") == {
        "bootstrap.servers": "127.0.0.1:9000", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "alice", "sasl.password": secret}
    assert cluster.java_options("alice", "SCRAM-SHA-512") == {
        "kafka.bootstrap.servers": "127.0.0.1:9000", "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  f'username="alice" password="{secret}";'}
    assert cluster.admin_config()["sasl.username"] == "admin"
    with pytest.raises(BrokerError, match="SASL mechanism 'GSSAPI' is not enabled"):
        cluster.client_config("alice", "GSSAPI")


def test_tls_client_settings_name_pkcs12_and_pem_stores(tmp_path):
    cluster = EmbeddedKafka(tmp_path, security="mtls")
    cluster.nodes = [Node(node_id=1, port=9000, controller_port=9100, directory=str(tmp_path), internal_port=9200)]
    material = cluster.material
    material.generate(tls=False)
    (material.path("ca.pem")).write_text("-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n")
    java = cluster.java_options("alice")
    assert java["kafka.security.protocol"] == "SSL"
    assert java["kafka.ssl.truststore.location"].endswith("truststore.p12")
    assert java["kafka.ssl.truststore.type"] == "PKCS12"
    assert java["kafka.ssl.truststore.password"] == material.truststore_password
    assert java["kafka.ssl.keystore.location"].endswith("alice.p12")
    assert java["kafka.ssl.keystore.password"] == java["kafka.ssl.key.password"] == material.password("alice")
    pem = cluster.java_options("alice", truststore="PEM")
    assert pem["kafka.ssl.truststore.type"] == "PEM" and pem["kafka.ssl.truststore.location"].endswith("ca.pem")
    assert "kafka.ssl.truststore.password" not in pem
    inline = cluster.java_options("alice", truststore="PEM-inline")
    assert inline["kafka.ssl.truststore.certificates"].startswith("-----BEGIN CERTIFICATE-----")
    assert "kafka.ssl.truststore.location" not in inline
    rd = cluster.client_config("alice", keystore="PEM")
    assert rd["ssl.ca.location"].endswith("ca.pem")
    assert rd["ssl.certificate.location"].endswith("alice.pem") and rd["ssl.key.location"].endswith("alice.key")


def test_pipeline_acls_prefix_the_transactional_ids_and_never_repeat_a_binding():
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    from kafka_eos_tools.broker.security import pipeline_acls

    bindings = pipeline_acls("alice", read_topics=["t"], write_topics=["t"], groups=["g"],
                             transactional_id_prefix="p", idempotent_write=True)
    assert len(bindings) == len(set(bindings))
    got = {(b.restype, b.name, b.resource_pattern_type, b.operation) for b in bindings}
    assert (ResourceType.TRANSACTIONAL_ID, "p", ResourcePatternType.PREFIXED, AclOperation.WRITE) in got
    assert (ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, AclOperation.WRITE) in got
    assert (ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, AclOperation.READ) in got
    assert (ResourceType.GROUP, "g", ResourcePatternType.LITERAL, AclOperation.READ) in got
    assert (ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, AclOperation.IDEMPOTENT_WRITE) in got
    assert all(b.principal == "User:alice" for b in bindings)


def test_cli_broker_start_takes_a_security_flag():
    import argparse

    from kafka_eos_tools import cli

    parser = argparse.ArgumentParser()
    cli._broker_commands(parser.add_subparsers(dest="group"))
    args = parser.parse_args(["broker", "start", "--security", "mtls", "--acls"])
    assert (args.security, args.acls) == ("mtls", True)
    with pytest.raises(SystemExit):
        parser.parse_args(["broker", "start", "--security", "kerberos"])
