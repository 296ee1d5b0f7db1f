"""The embedded broker's configuration and planning, without starting a JVM."""

from __future__ import annotations

import socket

import pytest

from kafka_eos_tools.broker import distribution
from kafka_eos_tools.broker.cluster import EmbeddedKafka
from kafka_eos_tools.broker.node import Node, server_properties
from kafka_eos_ds.errors import BrokerError


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
