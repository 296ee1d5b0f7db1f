"""Fixtures for integration tests: a real Kafka cluster and a real SparkSession.

The cluster, in order of preference:
1. an existing cluster named by ``KAFKA_EOS_BOOTSTRAP`` (host:port,...);
2. testcontainers' Kafka when a Docker engine answers;
3. the project's embedded Apache Kafka (KRaft, Maven Central jars) on 127.0.0.1.
The choice is printed in the pytest header so a run shows what it tested against.

The storage servers (``hdfs``, ``s3``, ``metastore``) follow the same rule: an existing
server named in the environment, else an embedded one started when a test first asks
(``integration/storage.py``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from integration import storage
from integration.warm_driver import WarmDriver
from kafka_eos_tools.spark_session import spark_builder
from kafka_eos_tools.topics import create_topic, unique_name


@dataclass
class KafkaUnderTest:
    bootstrap: str
    kind: str  # "external" | "testcontainers" | "embedded"
    brokers: int
    cluster: Any = None  # EmbeddedKafka when embedded

    def replication(self) -> int:
        return min(self.brokers, 3)


def _docker_answers() -> bool:
    if shutil.which("docker") is None and not os.path.exists("/var/run/docker.sock"):
        return False
    try:
        import docker  # installed with testcontainers

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def _brokers_of(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient

    return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).brokers)


def pytest_report_header(config: pytest.Config) -> list[str]:
    if os.environ.get("KAFKA_EOS_BOOTSTRAP"):
        kafka = f"kafka: external cluster at {os.environ['KAFKA_EOS_BOOTSTRAP']}"
    else:
        kafka = "kafka: testcontainers (Docker)" if _docker_answers() else \
            f"kafka: embedded Apache Kafka {_kafka_version() or '(default line)'} (KRaft) on 127.0.0.1"
    return [kafka, *storage.header_lines()]


def _kafka_version() -> str | None:
    """The embedded brokers' Kafka line (KAFKA_EOS_KAFKA_VERSION; unset or empty: the default)."""
    return os.environ.get("KAFKA_EOS_KAFKA_VERSION") or None


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaUnderTest]:
    external = os.environ.get("KAFKA_EOS_BOOTSTRAP")
    if external:
        yield KafkaUnderTest(external, "external", _brokers_of(external))
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            bootstrap = container.get_bootstrap_server()
            yield KafkaUnderTest(bootstrap, "testcontainers", 1)
        return
    yield from _embedded(tmp_path_factory, 1, _kafka_version())


def _embedded(tmp_path_factory: pytest.TempPathFactory, brokers: int,
              version: str | None) -> Iterator[KafkaUnderTest]:
    """Start an embedded cluster for a session fixture and stop it afterwards."""
    from kafka_eos_tools.broker.cluster import EmbeddedKafka

    cluster = EmbeddedKafka(tmp_path_factory.mktemp(f"kafka{brokers}-{version or 'default'}"), brokers=brokers,
                            kafka_version=version)
    try:
        yield KafkaUnderTest(cluster.start(), "embedded", brokers, cluster)
    finally:
        # The sinks run in this process too keep their driver clients between steps
        # (kafka_eos_ds/kafka/driver_session.py); closed first, they do not reconnect to
        # the stopped brokers and log every refused connection until the process exits.
        from kafka_eos_ds.kafka.driver_session import SESSIONS

        SESSIONS.close()
        cluster.stop()


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaUnderTest]:
    """A 3-broker embedded cluster (RF 3, min ISR 2) whose brokers tests may kill."""
    yield from _embedded(tmp_path_factory, 3, _kafka_version())


@pytest.fixture(scope="session")
def kafka39(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaUnderTest]:
    """An embedded Kafka 3.9 broker, for proving compatibility with the 3.x line."""
    yield from _embedded(tmp_path_factory, 1, "3.9")


@pytest.fixture(scope="session")
def kafka44(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaUnderTest]:
    """An embedded Kafka 4.4 broker: the newest release users run."""
    yield from _embedded(tmp_path_factory, 1, "4.4")


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[storage.HdfsUnderTest]:
    """HDFS: ``KAFKA_EOS_HDFS=hdfs://host:port``, else an embedded MiniDFSCluster."""
    yield from storage.hdfs_server(tmp_path_factory.mktemp("hdfs"))


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[storage.S3UnderTest]:
    """An S3-compatible store: ``KAFKA_EOS_S3_ENDPOINT`` (+ keys), else an embedded MinIO."""
    yield from storage.s3_server(tmp_path_factory.mktemp("minio"))


@pytest.fixture(scope="session")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[storage.GcsUnderTest]:
    """A GCS emulator: ``KAFKA_EOS_GCS_ENDPOINT``, else an embedded fake-gcs-server."""
    yield from storage.gcs_server(tmp_path_factory.mktemp("gcs"))


@pytest.fixture(scope="session")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[storage.MetastoreUnderTest]:
    """A Hive metastore: ``KAFKA_EOS_METASTORE=thrift://host:port``, else an embedded one."""
    yield from storage.metastore_server(tmp_path_factory.mktemp("metastore"))


@pytest.fixture(scope="session")
def s3_metastore(tmp_path_factory: pytest.TempPathFactory,
                 s3: storage.S3UnderTest) -> Iterator[storage.MetastoreUnderTest]:
    """A Hive metastore serving ``s3a://`` tables on ``s3``: ``KAFKA_EOS_S3_METASTORE``, else
    an embedded one with hadoop-aws on its classpath."""
    yield from storage.s3_metastore_server(tmp_path_factory.mktemp("s3-metastore"), s3)


@pytest.fixture
def new_topic(kafka: KafkaUnderTest) -> Callable[..., str]:
    """``new_topic(partitions=1, config=None) -> name``: a fresh topic per call."""

    def make(partitions: int = 1, config: dict | None = None, prefix: str = "t") -> str:
        return create_topic(kafka.bootstrap, unique_name(prefix), partitions, kafka.replication(), config)

    return make


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import kafka_eos_ds

    session = spark_builder().getOrCreate()
    kafka_eos_ds.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def warm_driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmDriver | None]:
    """The session's long-lived driver for pipeline runs that no fault can kill
    (:mod:`integration.warm_driver`), started on first use; ``KAFKA_EOS_WARM_DRIVER=0``:
    none, every run gets a driver process of its own."""
    if os.environ.get("KAFKA_EOS_WARM_DRIVER", "1") == "0":
        yield None
        return
    driver = WarmDriver(tmp_path_factory.mktemp("warm-driver"))
    _WARM_DRIVERS.append(driver)
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture(scope="session")
def builtin_connector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Spark's built-in Kafka connector in one child process for the whole session
    (integration/builtin_rows.py): ``.run(request)`` gives its rows, writes and errors."""
    from integration.builtin_rows import BuiltinConnector

    connector = BuiltinConnector(tmp_path_factory.mktemp("builtin") / "child.log")
    try:
        yield connector
    finally:
        connector.close()


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")


_CHAOS_ROWS: list = []
_WARM_DRIVERS: list = []


@pytest.fixture(scope="session")
def chaos_summary() -> list:
    """Chaos tests append (scenario, figures); the table is printed at the end of the run."""
    return _CHAOS_ROWS


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    for driver in _WARM_DRIVERS:
        terminalreporter.write_line(f"warm driver: {driver.runs} pipeline runs in {driver.starts} driver process(es)")
    if not _CHAOS_ROWS:
        return
    terminalreporter.section("exactly-once audit under chaos")
    cols = ["sink", "records_in", "records_out", "duplicates", "losses", "order_violations",
            "tail_duplicates", "bounces", "runs", "seconds"]
    widths = [max(len(c), 9) + 2 for c in cols]
    terminalreporter.write_line("scenario".ljust(34) + "".join(c.rjust(w) for c, w in zip(cols, widths, strict=True)))
    for name, row in _CHAOS_ROWS:
        terminalreporter.write_line(name[:33].ljust(34)
                                    + "".join(str(row.get(c, "")).rjust(w) for c, w in zip(cols, widths, strict=True)))
