"""The storage test servers' tooling without starting a server: the process handling,
the metastore's readiness call, and the errors for missing tools."""

from __future__ import annotations

import importlib
import os
import socket
import struct
import sys
import threading
import time

import pytest

from kafka_eos_tools.storage import ServerError, metastore, minio
from kafka_eos_tools.storage.process import ServerProcess


def test_a_server_that_exits_during_start_up_is_one_error_with_its_log(tmp_path):
    proc = ServerProcess("The test server", [sys.executable, "-c", "print('port 1 is busy'); raise SystemExit(3)"],
                         tmp_path / "server.log")
    with pytest.raises(ServerError, match="(?s)The test server exited during start-up.*port 1 is busy"):
        proc.wait_until(lambda: False, 30, "never")


def test_waiting_is_bounded_and_names_the_last_error(tmp_path):
    proc = ServerProcess("The test server", [sys.executable, "-c", "import time; time.sleep(60)"],
                         tmp_path / "server.log")
    try:
        def refused() -> bool:
            raise ConnectionRefusedError("refused")

        started = time.monotonic()
        with pytest.raises(ServerError, match="not ready \\(it answers\\) within 1s \\(last error: refused\\)"):
            proc.wait_until(refused, 1, "it answers")
        assert time.monotonic() - started < 10
    finally:
        proc.stop()


def test_stop_kills_a_server_that_ignores_sigterm(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    proc = ServerProcess("The test server", [sys.executable, "-c", code], tmp_path / "server.log")
    proc.wait_until(lambda: "up" in proc.log_tail(), 30, "printed up")
    pid = proc.pid
    proc.stop(timeout=0.5)
    assert proc.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _replying_server(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def _thrift_reply(message_type: int, fields: bytes) -> bytes:
    name = b"get_all_databases"
    return struct.pack(">iI", -2147418112 | message_type, len(name)) + name + struct.pack(">i", 1) + fields


def test_list_databases_reads_a_thrift_reply():
    names = b"".join(struct.pack(">I", len(n)) + n for n in (b"default", b"sales"))
    server, thread = _replying_server(_thrift_reply(2, struct.pack(">BhBi", 15, 0, 11, 2) + names + b"\x00"))
    with server:
        assert metastore.list_databases(server.getsockname()[1]) == ["default", "sales"]
    thread.join(5)


def test_list_databases_refuses_a_meta_exception():
    server, thread = _replying_server(_thrift_reply(2, struct.pack(">Bh", 12, 1) + b"\x00\x00"))
    with server, pytest.raises(ServerError, match="field 1"):
        metastore.list_databases(server.getsockname()[1])
    thread.join(5)


def test_metastore_settings_keep_everything_in_its_directory(tmp_path):
    settings = metastore.site_settings(tmp_path)
    assert settings["javax.jdo.option.ConnectionURL"].startswith(f"jdbc:derby:;databaseName={tmp_path}/")
    assert settings["hive.metastore.warehouse.dir"] == (tmp_path / "warehouse").as_uri()
    xml = metastore._site_xml(settings)
    assert "<name>datanucleus.schema.autoCreateAll</name><value>true</value>" in xml


def test_minio_keeps_its_secret_out_of_its_repr(tmp_path):
    server = minio.EmbeddedMinio(tmp_path)
    assert server.secret_key not in repr(server)
    assert server.secret_key != minio.EmbeddedMinio(tmp_path).secret_key


GO_SERVERS = [("minio", "KAFKA_EOS_MINIO_BINARY", "KAFKA_EOS_S3_ENDPOINT"),
              ("gcs", "KAFKA_EOS_GCS_BINARY", "KAFKA_EOS_GCS_ENDPOINT")]


@pytest.mark.parametrize("module, binary, endpoint", GO_SERVERS)
def test_missing_go_is_one_clear_line(tmp_path, monkeypatch, module, binary, endpoint):
    monkeypatch.setenv("KAFKA_EOS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(binary, raising=False)
    with pytest.raises(ServerError, match=f"'go' is not on PATH.*{endpoint}") as info:
        importlib.import_module(f"kafka_eos_tools.storage.{module}").binary()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("module, binary, endpoint", GO_SERVERS)
def test_a_named_server_binary_must_be_executable(tmp_path, monkeypatch, module, binary, endpoint):
    named = tmp_path / "server"
    named.write_text("")
    monkeypatch.setenv(binary, str(named))
    with pytest.raises(ServerError, match=f"{binary}=.* is not an executable file"):
        importlib.import_module(f"kafka_eos_tools.storage.{module}").binary()


def test_spark_reaches_the_gcs_emulator_without_credentials():
    from kafka_eos_tools.storage import gcs

    settings = gcs.spark_settings("http://127.0.0.1:4443")
    assert settings["spark.hadoop.fs.gs.storage.root.url"] == "http://127.0.0.1:4443"
    assert settings["spark.hadoop.fs.gs.auth.type"] == "UNAUTHENTICATED"
    # Hadoop 3.5's core-default.xml says 64m, which the GCS connector cannot parse.
    assert settings["spark.hadoop.fs.gs.block.size"] == str(64 << 20)


def test_missing_javac_is_one_clear_line(tmp_path, monkeypatch):
    from kafka_eos_tools.storage import javamain

    monkeypatch.setenv("KAFKA_EOS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ServerError, match="'javac' is not on PATH.*KAFKA_EOS_HDFS / KAFKA_EOS_METASTORE"):
        javamain.compiled("Nothing", "class Nothing {}", "")
