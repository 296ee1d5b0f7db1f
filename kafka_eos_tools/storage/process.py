"""One server process: started in its own session with its output in a log file,
waited for with a deadline, stopped by pid (the Kafka nodes' liveness and stop steps,
:mod:`kafka_eos_tools.broker.node`). :class:`EmbeddedServer` is what the three storage
servers share: a directory, one process, ``stop()`` and the context manager.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence, TypeVar

from kafka_eos_tools.broker import maven
from kafka_eos_tools.broker.node import is_alive, terminate
from kafka_eos_tools.storage import ServerError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def require(tool: str, why: str) -> str:
    """The path of ``tool`` on PATH, or one ServerError line saying what needs it."""
    found = shutil.which(tool)
    if found is None:
        raise ServerError(f"'{tool}' is not on PATH; {why}")
    return found


def go_binary(module: str, version: str, command: str, override: str, what: str, instead: str,
              timeout: float, go_version: str) -> Path:
    """A server published as a Go module only, built once with ``go install module@version``
    from the Go proxy (Go's own GOPROXY, GOMODCACHE and GOCACHE settings apply) into
    ``$KAFKA_EOS_CACHE/bin``; the environment variable ``override`` names a ready binary
    instead. ``what`` names the server and ``instead`` another way to get one, in errors;
    ``go_version`` is the oldest Go the module's go.mod accepts."""
    named = os.environ.get(override)
    if named:
        if not os.access(named, os.X_OK):
            raise ServerError(f"{override}={named} is not an executable file.")
        return Path(named)
    target = maven.cache_root() / "bin" / f"{command}-{version}"
    if target.exists():
        return target
    go = require("go", f"{what} is built once with 'go install {module}@{version}'. Install Go {go_version} or newer, "
                       f"set {override} to its binary, {instead}.")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{command}-build-", dir=target.parent) as staging:
        env = {**os.environ, "GOBIN": staging, "CGO_ENABLED": "0"}
        try:
            proc = subprocess.run([go, "install", f"{module}@{version}"], env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise ServerError(f"Building {what} ('go install {module}@{version}') did not finish within "
                              f"{timeout / 60:.0f} minutes; is the Go proxy reachable?") from exc
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise ServerError(f"Building {what} ('go install {module}@{version}') failed (is the Go proxy, "
                              f"{_goproxy(go)}, reachable?):\n{tail}")
        os.replace(Path(staging, module.rstrip("/").rsplit("/", 1)[-1]), target)  # whole or absent
    return target


def _goproxy(go: str) -> str:
    try:
        return subprocess.run([go, "env", "GOPROXY"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "GOPROXY"


class ServerProcess:
    """A started server: its pid and log, and how to wait for it and stop it."""

    def __init__(self, name: str, cmd: Sequence[str], log_file: Path, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.log_file = log_file
        log_file.parent.mkdir(parents=True, exist_ok=True)
        # Own session: a Ctrl-C or a test killing its process group leaves the server to be
        # stopped deliberately, by pid, through stop().
        with open(log_file, "ab") as log:
            # Kept so that its exit status is collected (a Popen dropped while its process
            # runs is a ResourceWarning); the process itself is handled by pid.
            self._popen = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True,
                                           env=dict(env) if env is not None else None, cwd=cwd)
        self.pid: int | None = self._popen.pid

    def alive(self) -> bool:
        return is_alive(self.pid)

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``ready()`` until it is true; fail fast if the process exits, and at the
        deadline with the log's tail. ``ready`` may raise while the server comes up."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not self.alive():
                self._popen.poll()
                raise ServerError(f"{self.name} exited during start-up. Log tail:\n{self.log_tail()}")
            try:
                if ready():
                    return
            except Exception as exc:  # not up yet: connection refused, safe mode, ...
                last = exc
            time.sleep(0.3)
        cause = f" (last error: {last})" if last else ""
        raise ServerError(f"{self.name} was not ready ({what}) within {timeout:.0f}s{cause}. "
                          f"Log tail:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
        terminate(self.pid, timeout)
        self._popen.poll()  # its status: reaped by terminate() already, or now
        self.pid = None

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])


_Server = TypeVar("_Server", bound="EmbeddedServer")


class EmbeddedServer:
    """A server with its files in ``directory``, run as one process by :meth:`launch`."""

    name = "The server"

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).resolve()
        self.process: ServerProcess | None = None

    def launch(self, cmd: Sequence[str], ready: Callable[[], bool], timeout: float, what: str,
               env: Mapping[str, str] | None = None) -> None:
        """Start ``cmd`` (log: ``directory/server.log``) and wait for ``ready``; stop it
        again if it is not ready in time."""
        self.process = ServerProcess(self.name, cmd, self.directory / "server.log", env=env, cwd=self.directory)
        try:
            self.process.wait_until(ready, timeout, what)
        except BaseException:
            self.stop()
            raise

    def start(self) -> str:
        """Start the server; returns its address once it is ready."""
        raise NotImplementedError

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def __enter__(self: _Server) -> _Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HttpServer(EmbeddedServer):
    """An embedded server answering HTTP on one loopback port (the object stores)."""

    def __init__(self, directory: str | Path) -> None:
        super().__init__(directory)
        self.port = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(endpoint={self.endpoint!r})"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"
