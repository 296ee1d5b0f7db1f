"""Files on a local disk, HDFS or S3, as the sink's driver-side Python reads them.

Spark keeps a streaming query's checkpoint wherever ``checkpointLocation`` says: a local
path, ``hdfs://``, ``s3a://``. The sink's steps run in Python processes without Spark's
Hadoop file systems, so they read the checkpoint through a client of their own
(docs/dev/decisions.md, "Filesystem layer"): ``hdfs-native`` (HDFS's RPC protocol, no JVM
or libhdfs) for ``hdfs://`` and ``viewfs://``, ``boto3`` for ``s3a://``/``s3://``.

Settings come the way a Spark user already has them: Hadoop's names as options of the
sink (``fs.s3a.endpoint``, ``fs.s3a.access.key``, ``fs.s3a.secret.key``,
``fs.s3a.path.style.access``, ``fs.s3a.endpoint.region``; any ``fs.*``/``dfs.*``/
``hadoop.*`` key reaches the HDFS client as Hadoop configuration, next to
``HADOOP_CONF_DIR``), or the clients' own environment (``AWS_*``). Secret values never
appear in a repr or an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol
from urllib.parse import urlparse

from kafka_eos_ds.errors import ConfigError

_SECRET = ("secret", "password", "token", "credential")
LOCAL, HDFS, S3 = ("", "file"), ("hdfs", "viewfs"), ("s3a", "s3", "s3n")
SUPPORTED = "a local path or file:, hdfs://, viewfs://, s3a:// (or s3://)"


@dataclass(frozen=True)
class StorageOptions:
    """The sink options that configure file-system clients (Hadoop's names)."""

    settings: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "StorageOptions":
        return cls({str(k): str(v) for k, v in options.items()
                    if str(k).lower().startswith(("fs.", "dfs.", "hadoop."))})

    def get(self, name: str) -> Optional[str]:
        return next((v for k, v in self.settings.items() if k.lower() == name.lower()), None)

    def __repr__(self) -> str:
        shown = {k: ("[redacted]" if any(s in k.lower() for s in _SECRET) else v) for k, v in self.settings.items()}
        return f"StorageOptions({shown})"


class Store(Protocol):
    """What the sink reads from a file system."""

    def read_text(self, path: str) -> str:
        """A small file's text; FileNotFoundError when it does not exist."""

    def list_names(self, path: str) -> list[str]:
        """The names in directory ``path`` (empty when it does not exist)."""


def readable(location: str) -> bool:
    """Whether the sink can read files at ``location`` (its scheme; the client may still
    have to be installed)."""
    scheme = urlparse(location).scheme.lower()
    return scheme in LOCAL or scheme in HDFS or scheme in S3 or (len(scheme) == 1 and location[1:3] in (":\\", ":/"))


def locate(location: str, options: Optional[StorageOptions] = None) -> tuple[Store, str]:
    """The store holding ``location`` and the path within it (ConfigError for a scheme
    the sink cannot read, naming the schemes it can)."""
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
    if scheme in LOCAL or (len(scheme) == 1 and location[1:3] in (":\\", ":/")):  # a Windows drive
        return LocalStore(), parsed.path if scheme == "file" else location
    if scheme in HDFS:
        return HdfsStore(f"{scheme}://{parsed.netloc}", options or StorageOptions()), parsed.path or "/"
    if scheme in S3:
        return S3Store(parsed.netloc, options or StorageOptions()), parsed.path.lstrip("/")
    raise ConfigError(f"The checkpoint location {location!r} uses the scheme {scheme!r}, which the sink cannot "
                      f"read from Python; it reads {SUPPORTED}.")


class LocalStore:
    def read_text(self, path: str) -> str:
        return Path(path).read_text()

    def list_names(self, path: str) -> list[str]:
        try:
            return [p.name for p in Path(path).iterdir()]
        except FileNotFoundError:
            return []


class HdfsStore:
    """HDFS through hdfs-native (RPC to the NameNode, reads from the DataNodes)."""

    def __init__(self, url: str, options: StorageOptions) -> None:
        try:
            import hdfs_native
        except ImportError:
            raise ConfigError(f"Reading {url} needs the HDFS client: pip install 'kafka-eos-ds[hdfs]' "
                              "(hdfs-native) in the driver's Python.") from None
        self._client = hdfs_native.Client(url, config=dict(options.settings) or None)

    def read_text(self, path: str) -> str:
        try:
            with self._client.read(path) as reader:
                return bytes(reader.read()).decode("utf-8")
        except FileNotFoundError:
            raise
        except OSError as exc:
            if "not found" in str(exc).lower() or "does not exist" in str(exc).lower():
                raise FileNotFoundError(path) from exc
            raise

    def list_names(self, path: str) -> list[str]:
        try:
            return [status.path.rstrip("/").rsplit("/", 1)[-1] for status in self._client.list_status(path)]
        except FileNotFoundError:
            return []


class S3Store:
    """S3 (and S3-compatible stores) through boto3; ``s3a://bucket/key`` and ``s3://``
    name the same objects."""

    def __init__(self, bucket: str, options: StorageOptions) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ConfigError(f"Reading s3a://{bucket} needs the S3 client: pip install 'kafka-eos-ds[s3]' (boto3) in "
                              "the driver's Python.") from None
        endpoint = options.get("fs.s3a.endpoint")
        if endpoint and "://" not in endpoint:
            ssl = (options.get("fs.s3a.connection.ssl.enabled") or "true").lower() != "false"
            endpoint = ("https://" if ssl else "http://") + endpoint
        path_style = (options.get("fs.s3a.path.style.access") or "").lower() == "true"
        self._bucket = bucket
        self._client = boto3.client(
            "s3", endpoint_url=endpoint or None, region_name=options.get("fs.s3a.endpoint.region"),
            aws_access_key_id=options.get("fs.s3a.access.key"), aws_secret_access_key=options.get("fs.s3a.secret.key"),
            aws_session_token=options.get("fs.s3a.session.token"),
            config=Config(s3={"addressing_style": "path"} if path_style else {},
                          request_checksum_calculation="when_required"))

    def read_text(self, path: str) -> str:
        try:
            body = self._client.get_object(Bucket=self._bucket, Key=path)["Body"].read()
        except self._client.exceptions.NoSuchKey:
            raise FileNotFoundError(f"s3a://{self._bucket}/{path}") from None
        return bytes(body).decode("utf-8")

    def list_names(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names: set[str] = set()
        for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix,
                                                                          Delimiter="/"):
            names.update(o["Key"][len(prefix):] for o in page.get("Contents", ()))
            names.update(p["Prefix"][len(prefix):].rstrip("/") for p in page.get("CommonPrefixes", ()))
        return sorted(n for n in names if n)
