"""Reading a table the file sink wrote, the way a reader of the store would: a local
directory, HDFS (hdfs-native) or S3 (boto3), each read with its own client, not with the
product's storage layer, so that the audit does not share the code it checks.

A reader of the table sees the final files: every ``part-*`` file under the root whose
path has no component starting with ``_`` or ``.`` (Spark's and Arrow's rule). What is
still staged is listed from ``_kafka_eos/<writer>/in-progress|pending`` (and, on S3, the
multipart uploads in progress).
"""

from __future__ import annotations

import io
import posixpath
from pathlib import Path
from typing import Any

from integration.sink_runs import FileAudit


class Table:
    """One table location: ``file:`` path, ``hdfs://host:port/dir`` or ``s3a://bucket/prefix``."""

    def __init__(self, url: str, s3: Any = None) -> None:
        self.url = url.rstrip("/")
        self.s3 = s3  # integration.storage.S3UnderTest for s3a:// tables

    # -- the store's own client --------------------------------------------------

    def files(self) -> list[str]:
        """Every file under the root, relative to it (staged ones included)."""
        scheme, _, rest = self.url.partition("://")
        if scheme == "hdfs":
            client, root = self._hdfs()
            return sorted(posixpath.relpath(s.path, root) for s in client.list_status(root, recursive=True)
                          if not s.isdir) if self._hdfs_exists(client, root) else []
        if scheme == "s3a":
            client, bucket, prefix = self._s3()
            keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                                           Prefix=prefix + "/")
                    for o in page.get("Contents", ())]
            return sorted(k[len(prefix) + 1:] for k in keys)
        root = Path(self.url.removeprefix("file://"))
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.exists() else []

    def read(self, relative: str) -> bytes:
        scheme = self.url.partition("://")[0]
        if scheme == "hdfs":
            client, root = self._hdfs()
            with client.read(f"{root}/{relative}") as reader:
                return bytes(reader.read())
        if scheme == "s3a":
            client, bucket, prefix = self._s3()
            return bytes(client.get_object(Bucket=bucket, Key=f"{prefix}/{relative}")["Body"].read())
        return (Path(self.url.removeprefix("file://")) / relative).read_bytes()

    def write(self, relative: str, data: bytes) -> None:
        scheme = self.url.partition("://")[0]
        if scheme == "hdfs":
            client, root = self._hdfs()
            with client.create(f"{root}/{relative}") as out:
                out.write(data)
            return
        if scheme == "s3a":
            client, bucket, prefix = self._s3()
            client.put_object(Bucket=bucket, Key=f"{prefix}/{relative}", Body=data)
            return
        path = Path(self.url.removeprefix("file://")) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def uploads(self) -> list[str]:
        """S3: the keys of multipart uploads in progress under the table (else empty)."""
        if not self.url.startswith("s3a://"):
            return []
        client, bucket, prefix = self._s3()
        # Listed whole and filtered: MinIO answers a Prefix only when it is a whole key.
        return sorted(u["Key"] for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket)
                      for u in page.get("Uploads", ()) if u["Key"].startswith(prefix + "/"))

    # -- what a reader sees --------------------------------------------------------

    def finals(self) -> list[str]:
        return [f for f in self.files() if not any(part[:1] in "_." for part in f.split("/"))
                and posixpath.basename(f).startswith("part-")]

    def staged(self) -> list[str]:
        return [f for f in self.files() if f.startswith("_kafka_eos/") and f.split("/")[2:3] in (["in-progress"],
                                                                                                  ["pending"])]

    def pending(self) -> list[str]:
        return [f for f in self.staged() if f.split("/")[2] == "pending"]

    def rows(self, column: str = "value") -> list[tuple[str, Any]]:
        """``(partition directory, value)`` of every row in the final files."""
        import pyarrow.parquet as pq

        out = []
        for name in self.finals():
            table = pq.read_table(io.BytesIO(self.read(name)), columns=[column])
            out += [(posixpath.dirname(name), v) for v in table.column(0).to_pylist()]
        return out

    def audit(self, expected: int, separator: str = "|") -> FileAudit:
        ids = [int((v.decode() if isinstance(v, bytes) else v).split(separator, 1)[0]) for _, v in self.rows()]
        return FileAudit(expected, ids, self.staged() + self.uploads())

    def visible(self) -> int:
        return len(self.rows())

    # -- clients -------------------------------------------------------------------

    def _hdfs(self) -> tuple[Any, str]:
        import hdfs_native

        scheme, _, rest = self.url.partition("://")
        netloc, _, path = rest.partition("/")
        return hdfs_native.Client(f"{scheme}://{netloc}"), "/" + path

    @staticmethod
    def _hdfs_exists(client: Any, path: str) -> bool:
        try:
            client.get_file_info(path)
            return True
        except FileNotFoundError:
            return False

    def _s3(self) -> tuple[Any, str, str]:
        import boto3
        from botocore.config import Config

        bucket, _, prefix = self.url.removeprefix("s3a://").partition("/")
        client = boto3.client("s3", config=Config(s3={"addressing_style": "path"}), **self.s3.client_kwargs())
        return client, bucket, prefix.strip("/")


def s3_options(s3: Any) -> dict[str, str]:
    """The store as a Spark user names it: Hadoop's s3a option names."""
    return {"fs.s3a.endpoint": s3.endpoint, "fs.s3a.access.key": s3.access_key or "",
            "fs.s3a.secret.key": s3.secret_key or "", "fs.s3a.endpoint.region": s3.region,
            "fs.s3a.path.style.access": "true"}


def partition_values(directory: str) -> dict[str, str]:
    """``{"dt": "2026-11-24", ...}`` of a Hive-style directory."""
    return dict(part.split("=", 1) for part in directory.split("/") if "=" in part)


def newest_decision(table: Table, writer: str) -> dict | None:
    """A writer's newest decision file (``_kafka_eos/<writer>/decisions/<n>.json``)."""
    import json

    numbered = [f for f in table.files() if f.startswith(f"_kafka_eos/{writer}/decisions/") and f.endswith(".json")]
    if not numbered:
        return None
    return json.loads(table.read(max(numbered, key=lambda f: int(posixpath.basename(f).split(".")[0]))))
