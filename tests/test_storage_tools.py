"""The storage test servers' tooling without starting a server: the process handling,
the metastore's readiness call, and the errors for missing tools."""

from __future__ import annotations

import os
import sys
import time

import pytest

from kafka_eos_tools.storage import ServerError
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


def test_missing_javac_is_one_clear_line(tmp_path, monkeypatch):
    from kafka_eos_tools.storage import javamain

    monkeypatch.setenv("KAFKA_EOS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ServerError, match="'javac' is not on PATH.*KAFKA_EOS_HDFS / KAFKA_EOS_METASTORE"):
        javamain.compiled("Nothing", "class Nothing {}", "")
