"""The storage servers of the integration tests: HDFS, an S3-compatible store, a GCS
emulator, a Hive metastore. Each is an existing server named in the environment, or else the project's
embedded one (``kafka_eos_tools.storage``) started on 127.0.0.1 for the session:

* ``KAFKA_EOS_HDFS=hdfs://host:port`` (``KAFKA_EOS_WEBHDFS=http://host:port`` optional);
* ``KAFKA_EOS_S3_ENDPOINT=http://host:port`` with ``KAFKA_EOS_S3_ACCESS_KEY``,
  ``KAFKA_EOS_S3_SECRET_KEY`` and ``KAFKA_EOS_S3_REGION`` (default us-east-1); without
  the keys the client libraries' own chain (``AWS_ACCESS_KEY_ID``, ...) applies;
* ``KAFKA_EOS_GCS_ENDPOINT=http://host:port``: a GCS emulator (no credentials);
* ``KAFKA_EOS_METASTORE=thrift://host:port``;
* ``KAFKA_EOS_S3_METASTORE=thrift://host:port``: a metastore that serves the S3 store's
  ``s3a://`` tables (else an embedded one given hadoop-aws, the store's ``fs.s3a.*``
  settings and its credentials in the environment).

The conftest's fixtures call these only when a test asks for them, so a run that uses
none starts none.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")


@dataclass
class HdfsUnderTest:
    url: str  # hdfs://host:port, as fs.defaultFS
    kind: str  # "external" | "embedded"
    webhdfs: str | None = None
    start_seconds: float = 0.0

    def path(self, *parts: str) -> str:
        """A fresh ``hdfs://`` path under ``/kafka-eos-tests`` (unique per call)."""
        return "/".join([self.url, "kafka-eos-tests", uuid.uuid4().hex[:10], *parts])


@dataclass
class S3UnderTest:
    endpoint: str
    kind: str
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    region: str = "us-east-1"
    start_seconds: float = 0.0

    def client_kwargs(self) -> dict[str, Any]:
        """boto3.client("s3", **kwargs) for this store (path-style addressing)."""
        kwargs: dict[str, Any] = {"endpoint_url": self.endpoint, "region_name": self.region}
        if self.access_key:
            kwargs.update(aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key)
        return kwargs

    def environment(self) -> dict[str, str]:
        """The same, as the AWS_* variables every S3 library reads."""
        env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region}
        env.update(self.credentials())
        return env

    def credentials(self) -> dict[str, str]:
        """``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, when the store has keys."""
        if self.access_key and self.secret_key:
            return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        return {}

    def new_bucket(self) -> str:
        import boto3
        from botocore.config import Config

        name = f"kafka-eos-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", config=Config(s3={"addressing_style": "path"}), **self.client_kwargs()) \
            .create_bucket(Bucket=name)
        return name


@dataclass
class MetastoreUnderTest:
    uri: str  # thrift://host:port, as hive.metastore.uris
    kind: str
    start_seconds: float = 0.0

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.uri.removeprefix("thrift://").rsplit(":", 1)
        return host, int(port)


def header_lines() -> list[str]:
    """What the pytest header says about each server (started only if a test asks)."""
    hdfs = os.environ.get("KAFKA_EOS_HDFS")
    s3 = os.environ.get("KAFKA_EOS_S3_ENDPOINT")
    gcs = os.environ.get("KAFKA_EOS_GCS_ENDPOINT")
    metastore = os.environ.get("KAFKA_EOS_METASTORE")
    s3_metastore = os.environ.get("KAFKA_EOS_S3_METASTORE")
    return [
        f"hdfs: external at {hdfs}" if hdfs else "hdfs: embedded MiniDFSCluster on 127.0.0.1 (if a test asks)",
        f"s3: external at {s3}" if s3 else "s3: embedded MinIO on 127.0.0.1 (if a test asks)",
        f"gcs: external at {gcs}" if gcs else "gcs: embedded fake-gcs-server on 127.0.0.1 (if a test asks)",
        f"metastore: external at {metastore}" if metastore
        else "metastore: embedded Hive metastore on 127.0.0.1 (if a test asks)",
        f"s3 metastore: external at {s3_metastore}" if s3_metastore
        else "s3 metastore: embedded Hive metastore with hadoop-aws on 127.0.0.1 (if a test asks)",
    ]


def hdfs_server(directory: Path) -> Iterator[HdfsUnderTest]:
    external = os.environ.get("KAFKA_EOS_HDFS")
    if external:
        yield HdfsUnderTest(external.rstrip("/"), "external", os.environ.get("KAFKA_EOS_WEBHDFS"))
        return
    from kafka_eos_tools.storage.hdfs import EmbeddedHdfs

    server = EmbeddedHdfs(directory)
    yield from _embedded(server, lambda url, took: HdfsUnderTest(url, "embedded", server.webhdfs, took))


def s3_server(directory: Path) -> Iterator[S3UnderTest]:
    external = os.environ.get("KAFKA_EOS_S3_ENDPOINT")
    if external:
        yield S3UnderTest(external, "external", os.environ.get("KAFKA_EOS_S3_ACCESS_KEY"),
                          os.environ.get("KAFKA_EOS_S3_SECRET_KEY"), os.environ.get("KAFKA_EOS_S3_REGION", "us-east-1"))
        return
    from kafka_eos_tools.storage.minio import EmbeddedMinio

    server = EmbeddedMinio(directory)
    yield from _embedded(server, lambda endpoint, took: S3UnderTest(
        endpoint, "embedded", server.access_key, server.secret_key, server.region, took))


@dataclass
class GcsUnderTest:
    endpoint: str  # http://host:port, the JSON API's root
    kind: str  # "external" | "embedded"
    start_seconds: float = 0.0

    def new_bucket(self) -> str:
        from kafka_eos_tools.storage.gcs import create_bucket

        name = f"kafka-eos-{uuid.uuid4().hex[:12]}"
        create_bucket(self.endpoint, name)
        return name


def gcs_server(directory: Path) -> Iterator[GcsUnderTest]:
    external = os.environ.get("KAFKA_EOS_GCS_ENDPOINT")
    if external:
        yield GcsUnderTest(external, "external")
        return
    from kafka_eos_tools.storage.gcs import EmbeddedGcs

    yield from _embedded(EmbeddedGcs(directory), lambda endpoint, took: GcsUnderTest(endpoint, "embedded", took))


def metastore_server(directory: Path) -> Iterator[MetastoreUnderTest]:
    external = os.environ.get("KAFKA_EOS_METASTORE")
    if external:
        yield MetastoreUnderTest(external, "external")
        return
    from kafka_eos_tools.storage.metastore import EmbeddedMetastore

    yield from _embedded(EmbeddedMetastore(directory),
                         lambda uri, took: MetastoreUnderTest(uri, "embedded", took))


def s3_metastore_server(directory: Path, s3: S3UnderTest) -> Iterator[MetastoreUnderTest]:
    """A metastore serving ``s3a://`` tables on ``s3``."""
    external = os.environ.get("KAFKA_EOS_S3_METASTORE")
    if external:
        yield MetastoreUnderTest(external, "external")
        return
    from kafka_eos_tools.storage import s3a
    from kafka_eos_tools.storage.metastore import EmbeddedMetastore

    server = EmbeddedMetastore(directory, s3=s3a.hadoop_settings(s3.endpoint, s3.region), environment=s3.credentials())
    yield from _embedded(server, lambda uri, took: MetastoreUnderTest(uri, "embedded", took))


def _embedded(server: Any, under_test: Callable[[str, float], T]) -> Iterator[T]:
    """Start ``server`` for the session: what ``under_test(address, start seconds)`` makes
    of it, then the server stopped (by pid) whatever the tests did."""
    started = time.monotonic()
    try:
        address = server.start()
        yield under_test(address, time.monotonic() - started)
    finally:
        server.stop()
