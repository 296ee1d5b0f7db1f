"""A Spark Connect server run from the installed pyspark, for the Spark Connect test.

Every pyspark 4.x wheel ships the server (``pyspark/jars/spark-connect_2.13-*.jar``), but
only some ship ``sbin/start-connect-server.sh`` (4.3 does, 4.0-4.2 do not), and that
script daemonizes through ``spark-daemon.sh``. So the server class the script starts,
``org.apache.spark.sql.connect.service.SparkConnectServer``, is started here with the
wheel's ``bin/spark-submit`` in the foreground: ``spark-submit`` execs ``spark-class``,
which execs ``java``, so the pid kept is the server's JVM (the driver), and the Python
workers it forks are its descendants. ``kill`` SIGKILLs them all at once: a driver crash.

The server binds gRPC to 127.0.0.1 on a free port, runs ``local[2]`` with a 1 GiB driver,
no UI, an empty conf dir and its scratch space under the given directory. Its Python
workers run this interpreter (``PYSPARK_PYTHON``), so they import the installed
kafka_eos_ds, and Spark's data source discovery finds the ``pyspark_kafka_eos`` shim.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from integration.standalone import SPARK_HOME, spark_env, tail
from kafka_eos_tools import jvm_archive
from kafka_eos_tools.broker.cluster import free_port
from kafka_eos_tools.demo import processes

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def connect_jar() -> Path | None:
    """The wheel's Spark Connect server jar, or None when this pyspark does not ship it."""
    return next(iter(sorted((SPARK_HOME / "jars").glob("spark-connect_2.13-*.jar"))), None)


def client_missing() -> str | None:
    """What the Spark Connect client of this pyspark lacks (pyspark[connect]), or None."""
    try:  # the module checks the client's dependencies when imported
        import pyspark.sql.connect.session  # noqa: F401
    except ImportError as exc:  # PySparkImportError is one too; it names the package
        import pyspark

        return f"{exc} (install it with: pip install 'pyspark[connect]=={pyspark.__version__}')"
    return None


class ConnectServer:
    def __init__(self, workdir: Path, port: int | None = None, python: str = sys.executable,
                 extra_conf: dict | None = None) -> None:
        self.workdir, self.python = workdir, python
        self.port = port or free_port()
        self.extra_conf = dict(extra_conf or {})
        self.proc = None
        self.starts = 0
        self.workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"server-{self.starts}.log"

    def command(self) -> list[str]:
        jar = connect_jar()
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.python.worker.reuse": "true",
            "spark.sql.warehouse.dir": str(self.workdir / "warehouse"),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            **self.extra_conf,
        }
        java_options = jvm_archive.java_options()
        if java_options:
            conf.setdefault("spark.driver.extraJavaOptions", java_options)
        cmd = [str(SPARK_HOME / "bin" / "spark-submit"), "--class", SERVER_CLASS,
               "--name", "Spark Connect server", "--master", "local[2]", "--driver-memory", "1g"]
        if jar is None:  # not in the wheel: the jar fetched from Maven Central (see start)
            cmd += ["--jars", str(self._fetched_jar())]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        return cmd

    def _fetched_jar(self) -> Path:
        import pyspark

        from kafka_eos_tools.broker.maven import fetch

        directory = fetch([f"org.apache.spark:spark-connect_2.13:{pyspark.__version__}"],
                          f"spark-connect-{pyspark.__version__}", transitive=False)
        return next(directory.glob("spark-connect_2.13-*.jar"))

    def start(self, timeout: float = 120.0) -> str:
        """Start the server and return its URL once it runs a query of a new session."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("the Spark Connect server is already running")
        self.starts += 1
        env = spark_env(self.workdir)
        env.update(PYSPARK_PYTHON=self.python, PYSPARK_DRIVER_PYTHON=self.python,
                   SPARK_NO_DAEMONIZE="1",
                   # For this class the launcher lets SPARK_DAEMON_MEMORY (spark_env: 256m)
                   # override --driver-memory.
                   SPARK_DAEMON_MEMORY="1g")
        self.proc = processes.start(self.command(), self.log, env)
        deadline = time.monotonic() + timeout
        # First the port: the client retries an unreachable server with a long backoff.
        while not self._listening():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                reason = (f"exited with {self.proc.returncode}" if self.proc.poll() is not None
                          else f"not listening on 127.0.0.1:{self.port} within {timeout:.0f}s")
                self.kill()
                raise RuntimeError(f"the Spark Connect server did not start ({reason}); log {self.log}:\n"
                                   f"{tail(self.log, 40)}")
            time.sleep(0.3)
        session = self.session()
        try:
            assert session.range(3).count() == 3
        finally:
            self.close(session)
        return self.url

    def _listening(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def session(self) -> Any:
        """A new remote SparkSession on this server (never a cached one of an old server)."""
        from pyspark.sql import SparkSession
        from pyspark.sql.connect.client.retries import DefaultPolicy

        session = SparkSession.builder.remote(self.url).create()
        # The default policy retries an unreachable server for at least 10 minutes; a
        # test gives up after about 10 seconds instead.
        session.client.set_retry_policies([DefaultPolicy(max_retries=6, max_backoff=3000)])
        return session

    @staticmethod
    def close(session: Any) -> None:
        """Stop a session of a live server (releases it there)."""
        # Result iterators left in reference cycles release their operation on the server
        # from __del__, through a thread pool the client shuts down when it stops. Collect
        # them while the pool runs; collected later, each raises in the garbage collector.
        gc.collect()
        session.stop()

    @staticmethod
    def abandon(session: Any) -> None:
        """Drop a session whose server is gone, without an RPC (the client would retry a
        dead server with backoff for minutes): close its channel, unset it as default."""
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

        try:
            session.client.close()
        except Exception:
            pass
        if getattr(RemoteSparkSession, "_default_session", None) is session:
            RemoteSparkSession._default_session = None
        active = getattr(RemoteSparkSession, "_active_session", None)
        if getattr(active, "session", None) is session:
            active.session = None

    def pids(self) -> list[int]:
        if self.proc is None:
            return []
        return [self.proc.pid, *processes.descendants(self.proc.pid)]

    def kill(self) -> list[int]:
        """SIGKILL the server's JVM and every process it started (its Python workers)."""
        if self.proc is None:
            return []
        victims = processes.kill_tree(self.proc.pid)
        processes.wait_gone(victims, timeout=20)
        try:
            self.proc.wait(10)
        except Exception:
            pass
        return victims

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        return tail(self.log, lines)


class Watchdog(threading.Thread):
    """Bounds a test that talks to a Connect server: after ``budget`` seconds it dumps
    every thread's stack to stderr and SIGKILLs the server, so a client call stuck on it
    fails (within the session's short retry policy) and the test ends with an error."""

    def __init__(self, server: ConnectServer, budget: float) -> None:
        super().__init__(daemon=True)
        self.server, self.budget = server, budget
        self.cancelled = threading.Event()
        self.fired = False

    def run(self) -> None:
        if self.cancelled.wait(self.budget):
            return
        self.fired = True
        sys.stderr.write(f"watchdog: the test ran over {self.budget:.0f}s; stacks, then the server is killed\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        self.server.kill()

    def __enter__(self) -> "Watchdog":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancelled.set()


def bounded(call, timeout: float, what: str):
    """``call()`` in a helper thread; TimeoutError when it has not returned in ``timeout`` s
    (for client calls with no timeout of their own)."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"{what} did not return in {timeout:.0f}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class QueryWatch(threading.Thread):
    """Asks the server whether a streaming query still runs, every ``every`` seconds, in
    the background, so a slow status call never stalls the loop that decides when to kill
    or stop. ``failure`` is the query's exception (or the status call's error) once it
    stopped by itself."""

    def __init__(self, query: Any, every: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.query, self.every = query, every
        self.failure: str | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                if not self.query.isActive:
                    if not self.stopping.is_set():
                        self.failure = f"the query stopped: {self.query.exception()}"
                    return
            except Exception as exc:
                if not self.stopping.is_set():
                    self.failure = f"asking the server about the query failed: {exc}"
                return
            self.stopping.wait(self.every)

    def __enter__(self) -> "QueryWatch":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()


def restore_client_mode(saved: dict) -> None:
    """Creating a remote session marks this process as a Spark Connect one
    (SPARK_CONNECT_MODE_ENABLED); undo that so later classic sessions of the same pytest
    run stay classic."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
