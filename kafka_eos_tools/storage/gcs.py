"""A Google Cloud Storage emulator on 127.0.0.1, and Spark's ``gs://`` to reach it.

The server is fake-gcs-server, which speaks GCS's JSON API (the calls Hadoop's GCS
connector and pyarrow's GCS client make, including the create-only-if-absent upload,
``ifGenerationMatch=0``, on which Spark's checkpoint files rely). It is published as a Go
module only, so it is built once with ``go install`` (:func:`process.go_binary`);
``KAFKA_EOS_GCS_BINARY`` names a ready binary instead. It needs no credentials.

Spark writes ``gs://`` through Google's GCS connector for Hadoop (its shaded jar from
Maven Central), the one that lets the endpoint be set (``fs.gs.storage.root.url``).
Hadoop 3.5's own ``hadoop-gcp`` has no such setting, and its ``core-default.xml`` gives
sizes as ``64m``, which the Google connector cannot parse: :func:`spark_settings` sets
them in bytes. The emulator lacks GCS's newer object-move call, so renames copy
(``fs.gs.operation.move.enable=false``); the checkpoint's files are created in place and
do not rename.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

from kafka_eos_tools.broker import maven
from kafka_eos_tools.storage.process import HttpServer, free_port, go_binary, require

MODULE = "github.com/fsouza/fake-gcs-server"
VERSION = "v1.56.1"
# Measured: ~2 minutes on a busy 2-core machine with a warm module cache.
BUILD_TIMEOUT = 1200.0
CONNECTOR = "com.google.cloud.bigdataoss:gcs-connector:3.1.15:jar:shaded"


def binary() -> Path:
    """The fake-gcs-server binary, built on first use."""
    return go_binary(MODULE, VERSION, "fake-gcs-server", "KAFKA_EOS_GCS_BINARY", "the embedded GCS emulator",
                     "or name an existing GCS endpoint with KAFKA_EOS_GCS_ENDPOINT", BUILD_TIMEOUT, "1.26")


class EmbeddedGcs(HttpServer):
    """fake-gcs-server keeping its objects in ``directory/data``; ``endpoint`` is its
    address (``http://127.0.0.1:PORT``)."""

    name = "The embedded GCS emulator"

    def start(self, timeout: float = 60.0) -> str:
        """Start the server; returns :attr:`endpoint` once it lists buckets."""
        executable = binary()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        address = f"127.0.0.1:{self.port}"
        cmd = [str(executable), "-backend", "filesystem", "-filesystem-root", str(self.directory / "data"),
               "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
               # Upload sessions and public links name this address, not storage.googleapis.com.
               "-external-url", self.endpoint, "-public-host", address, "-log-level", "warn"]
        self.launch(cmd, self._ready, timeout, "GET /storage/v1/b answered 200", env={**os.environ, "GOMAXPROCS": "2"})
        return self.endpoint

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=5) as response:
            return response.status == 200


def create_bucket(endpoint: str, name: str) -> None:
    """Create bucket ``name`` through the JSON API (no credentials: an emulator)."""
    request = urllib.request.Request(f"{endpoint}/storage/v1/b?project=kafka-eos", method="POST",
                                     data=json.dumps({"name": name}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        if response.status != 200:
            raise RuntimeError(f"creating bucket {name} at {endpoint} answered {response.status}")


def spark_jars() -> str:
    """``spark.jars`` for ``gs://``: the GCS connector's shaded jar (fetched once)."""
    require("mvn", "it fetches the GCS connector once (e.g. 'apt-get install maven').")
    directory = maven.fetch([CONNECTOR], "gcs-connector", transitive=False)
    return ",".join(str(p) for p in sorted(directory.glob("*.jar")))


def spark_settings(endpoint: str) -> dict[str, str]:
    """Spark settings that point ``gs://`` at the emulator at ``endpoint``, without credentials."""
    mib = 1 << 20
    return {"spark.hadoop.fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
            "spark.hadoop.fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
            "spark.hadoop.fs.gs.storage.root.url": endpoint,
            "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED",
            "spark.hadoop.fs.gs.project.id": "kafka-eos",
            "spark.hadoop.fs.gs.operation.move.enable": "false",
            **{f"spark.hadoop.fs.gs.{name}": str(size * mib) for name, size in (
                ("block.size", 64), ("rewrite.max.chunk.size", 512), ("outputstream.buffer.size", 8),
                ("inputstream.inplace.seek.limit", 8), ("inputstream.min.range.request.size", 2))}}
