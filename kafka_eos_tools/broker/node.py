"""One KRaft node (broker + controller in one JVM): its config, storage and process.

A node is described by a small JSON-able dataclass so that a cluster started by one
process (``python -m kafka_eos_tools broker start``) can be stopped by another (``... stop``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from kafka_eos_tools.errors import BrokerError

# Sized for a 2-core, 24 GiB machine running up to three nodes next to Spark.
HEAP_OPTS = ["-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]


@dataclass
class Node:
    node_id: int
    port: int
    controller_port: int
    directory: str
    pid: int | None = None
    # Secured clusters only: the PLAINTEXT inter-broker listener (security.py says why).
    internal_port: int | None = None

    @property
    def path(self) -> Path:
        return Path(self.directory)

    @property
    def log_file(self) -> Path:
        return self.path / "server.log"

    def to_json(self) -> dict:
        return asdict(self)


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home, "bin", "java") if home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise BrokerError(
            "Java ('java') is not on PATH and JAVA_HOME is not set; the embedded Kafka needs "
            "Java 17 or newer. Install a JDK or set KAFKA_EOS_BOOTSTRAP to use an existing cluster."
        )
    return found


def server_properties(node: Node, voters: str, replication: int, client_protocol: str = "PLAINTEXT",
                      secured: dict[str, Any] | None = None) -> str:
    """The broker config. Replication settings follow the cluster size so a 3-node
    cluster has RF 3 / min ISR 2 everywhere, including the transaction state log.

    With a ``client_protocol`` other than PLAINTEXT, clients get a CLIENT listener of that
    protocol on the node's port and brokers talk over a PLAINTEXT INTERNAL listener on
    ``internal_port``; ``secured`` holds that listener's settings (security.py)."""
    min_isr = min(2, replication)
    controller = f"CONTROLLER://127.0.0.1:{node.controller_port}"
    if client_protocol == "PLAINTEXT":
        listeners = {
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
        }
    else:
        if node.internal_port is None:
            raise BrokerError(f"Kafka node {node.node_id} has no inter-broker port; a secured cluster needs one.")
        client, internal = f"CLIENT://127.0.0.1:{node.port}", f"INTERNAL://127.0.0.1:{node.internal_port}"
        listeners = {
            "listeners": f"{client},{internal},{controller}",
            "advertised.listeners": f"{client},{internal}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map":
                f"CLIENT:{client_protocol},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    lines = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        **listeners,
        "log.dirs": str(node.path / "data"),
        "default.replication.factor": replication,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        # 50 partitions each (the defaults) make start-up slow on two cores.
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.num.partitions": 4,
        "num.partitions": 1,
        # Topics are created on purpose: a typo in a sink's topic must be an error.
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": 0,
        # Abort a transaction past its timeout within a second, not the default 10 s: tests
        # that wait for the broker to do so (crash points 8 and 10) wait less.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "background.threads": 4,
        "log.cleaner.threads": 1,
        "unclean.leader.election.enable": "false",
        **(secured or {}),
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def format_storage(node: Node, classpath: str, cluster_id: str, extra_args: Sequence[str] = ()) -> None:
    """Format the node's KRaft storage once; ``extra_args`` (e.g. ``--add-scram``) apply."""
    if (node.path / "data" / "meta.properties").exists():
        return
    cmd = [java_binary(), "-Xmx256m", "-cp", classpath, "kafka.tools.StorageTool", "format",
           # '=' form: a random cluster id may start with '-', which argparse takes for an option.
           f"--cluster-id={cluster_id}", "-c", str(node.path / "server.properties"), *extra_args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        # The arguments may hold SCRAM passwords: the message names none of them.
        raise BrokerError(f"Formatting KRaft storage of node {node.node_id} failed:\n{proc.stdout}{proc.stderr}")


def start_process(node: Node, classpath: str) -> int:
    cmd = [java_binary(), *HEAP_OPTS, "-Djava.awt.headless=true",
           "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
           "-Dorg.slf4j.simpleLogger.showDateTime=true",
           "-cp", classpath, "kafka.Kafka", str(node.path / "server.properties")]
    # Own session: a Ctrl-C or a test killing its process group leaves the broker to
    # be stopped deliberately, by pid, through stop()/kill().
    with open(node.log_file, "ab") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    node.pid = proc.pid
    (node.path / "pid").write_text(str(proc.pid))
    return proc.pid


def is_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child (exited, not yet reaped) still answers kill(0).
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop_process(node: Node, timeout: float = 20.0) -> None:
    """SIGTERM (controlled shutdown), then SIGKILL if it does not exit in time."""
    terminate(node.pid, timeout)
    node.pid = None


def kill_process(node: Node) -> None:
    kill_pid(node.pid)
    node.pid = None


def terminate(pid: int | None, timeout: float = 20.0) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within ``timeout`` seconds."""
    if pid is None or not is_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(pid)
        if not is_alive(pid):
            return
        time.sleep(0.1)
    kill_pid(pid)


def kill_pid(pid: int | None) -> None:
    if pid is not None and is_alive(pid):
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while is_alive(pid) and time.monotonic() < deadline:
            reap(pid)
            time.sleep(0.05)
        reap(pid)  # is_alive() is already false for a zombie; collect it


def log_tail(node: Node, lines: int = 25) -> str:
    try:
        text = node.log_file.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])
