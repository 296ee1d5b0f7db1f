"""A MinIO server on 127.0.0.1, the S3-compatible store of the tests.

MinIO is chosen for being faithful where the table sink relies on S3: an in-progress
multipart upload is not listed, CompleteMultipartUpload is the moment the object
appears, and completing again answers NoSuchUpload (docs/dev/decisions.md). It is published
as a Go module only, so it is built once with ``go install`` from the Go proxy (Go's own
GOPROXY, GOMODCACHE and GOCACHE settings apply) into ``$KAFKA_EOS_CACHE/bin`` (default
``~/.cache/kafka-eos/bin``); ``KAFKA_EOS_MINIO_BINARY`` names a ready binary instead.

Each server gets a random root user and password, kept in ``DIR/credentials.json``
(mode 0600) and in the object's attributes; nothing prints them.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.request
from pathlib import Path

from kafka_eos_tools.storage.process import HttpServer, free_port, go_binary

MODULE = "github.com/minio/minio"
# The repository tags releases as RELEASE.<date>, which Go does not take for versions;
# this is the pseudo-version `@latest` resolved to on 2026-11-24 (a commit of 2026-02-12).
VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
# Measured: ~5.5 minutes on an idle 2-core machine with an empty module cache.
BUILD_TIMEOUT = 1800.0


def binary() -> Path:
    """The MinIO server binary, built on first use."""
    return go_binary(MODULE, VERSION, "minio", "KAFKA_EOS_MINIO_BINARY", "the embedded S3 store (MinIO)",
                     "or name an existing S3 endpoint with KAFKA_EOS_S3_ENDPOINT", BUILD_TIMEOUT, "1.24")


class EmbeddedMinio(HttpServer):
    """A single-drive MinIO in ``directory`` (data, log, credentials) on free loopback ports.

    ``endpoint`` is the S3 address (``http://127.0.0.1:PORT``, path-style);
    ``access_key`` / ``secret_key`` its root credentials; ``region`` us-east-1.
    """

    name = "The embedded MinIO"
    region = "us-east-1"

    def __init__(self, directory: str | Path) -> None:
        super().__init__(directory)
        self.access_key = "kafka-eos-" + secrets.token_hex(4)
        self.secret_key = secrets.token_urlsafe(24)

    def start(self, timeout: float = 60.0) -> str:
        """Start the server; returns :attr:`endpoint` once MinIO reports itself ready."""
        executable = binary()
        self.directory.mkdir(parents=True, exist_ok=True)
        credentials = self.directory / "credentials.json"
        credentials.touch(mode=0o600)
        credentials.write_text(json.dumps({"access_key": self.access_key, "secret_key": self.secret_key}))
        self.port, console = free_port(), free_port()
        env = {**os.environ, "MINIO_ROOT_USER": self.access_key, "MINIO_ROOT_PASSWORD": self.secret_key,
               "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "MINIO_REGION": self.region,
               # Two cores: MinIO sizes its worker pools from GOMAXPROCS.
               "GOMAXPROCS": "2"}
        cmd = [str(executable), "server", str(self.directory / "data"), "--quiet",
               "--address", f"127.0.0.1:{self.port}", "--console-address", f"127.0.0.1:{console}"]
        self.launch(cmd, self._ready, timeout, "GET /minio/health/ready answered 200", env=env)
        return self.endpoint

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.endpoint}/minio/health/ready", timeout=5) as response:
            return response.status == 200
