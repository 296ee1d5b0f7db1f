"""One server process: started in its own session with its output in a log file,
waited for with a deadline, stopped by pid (the Kafka nodes' liveness and stop steps,
:mod:`kafka_eos_tools.broker.node`). :class:`EmbeddedServer` is what the three storage
servers share: a directory, one process, ``stop()`` and the context manager.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence, TypeVar

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
