"""An embedded Apache Kafka cluster (KRaft) on loopback, for the demo and the tests.

``EmbeddedKafka(dir, brokers=3).start()`` fetches the pinned jars (once), formats
storage, starts every node on free loopback ports and returns the bootstrap address
once the cluster accepts transactional writes. Its state (ports, pids) is kept in
``dir/cluster.json`` so another process can stop it, and so a second start in the same
directory reuses the running cluster instead of corrupting it.

``security="sasl"|"ssl"|"mtls"|"sasl_ssl"`` (and ``acls=True``) secure the client listener;
the cluster then hands out client settings per user (:mod:`.security` describes the
listeners and the generated material).
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from pathlib import Path

from kafka_eos_tools.broker import distribution, maven
from kafka_eos_tools.broker import security as sec
from kafka_eos_tools.broker.node import (
    Node,
    format_storage,
    is_alive,
    kill_process,
    log_tail,
    server_properties,
    start_process,
    stop_process,
)
from kafka_eos_tools.errors import BrokerError

STATE_FILE = "cluster.json"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


class EmbeddedKafka:
    """A 1..N node KRaft cluster run from Maven Central jars on 127.0.0.1.

    Parameters
    ----------
    directory : path holding configs, data, logs and ``cluster.json``.
    brokers : number of nodes (each is broker and controller). With 3, replication
        factor 3 and min ISR 2 apply to every topic including the transaction log.
    kafka_version : a pinned version ('4.1', '4.4', '3.9' or a full one); default 4.1.
    base_port : first client port to use (then +1 per node; controllers above them);
        free ports are picked when omitted.
    security : the client listener: plaintext (default), sasl (SASL_PLAINTEXT with PLAIN
        and SCRAM-SHA-256/512), ssl, mtls (client certificates required) or sasl_ssl.
    acls : with an authenticating ``security``, turn on the StandardAuthorizer with
        ``allow.everyone.if.no.acl.found=false``; only the admin user is a super user.
    """

    def __init__(self, directory: str | Path, brokers: int = 1, kafka_version: str | None = None,
                 base_port: int | None = None, security: str | sec.Security | None = None,
                 acls: bool = False) -> None:
        if brokers < 1:
            raise BrokerError("The number of brokers must be at least 1.")
        self.directory = Path(directory).resolve()
        self.brokers = brokers
        self.kafka_version = distribution.resolve_version(kafka_version)
        self.base_port = base_port
        self.nodes: list[Node] = []
        self.cluster_id: str | None = None
        self._classpath: str | None = None
        self.security = sec.parse_security(security)
        self.acls = acls
        self.material = sec.Material(self.directory / "security") if self.security is not sec.Security.PLAINTEXT \
            else None
        self._check_acls()  # before anything starts, so a wrong combination costs no JVM

    # -- state ---------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def _save(self) -> None:
        state = {"kafka_version": self.kafka_version, "cluster_id": self.cluster_id,
                 "bootstrap": self.bootstrap, "security": self.security.value, "acls": self.acls,
                 "nodes": [n.to_json() for n in self.nodes]}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_path)

    @classmethod
    def load(cls, directory: str | Path) -> EmbeddedKafka:
        path = Path(directory).resolve() / STATE_FILE
        if not path.exists():
            raise BrokerError(f"No embedded Kafka was started in {path.parent} (no {STATE_FILE}).")
        state = json.loads(path.read_text())
        cluster = cls(path.parent, brokers=len(state["nodes"]), kafka_version=state["kafka_version"],
                      security=state.get("security"), acls=state.get("acls", False))
        cluster.cluster_id = state["cluster_id"]
        cluster.nodes = [Node(**n) for n in state["nodes"]]
        return cluster

    def running(self) -> list[Node]:
        return [n for n in self.nodes if is_alive(n.pid)]

    # -- lifecycle -----------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> str:
        """Start (or reuse) the cluster; returns the bootstrap address when it is ready."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.state_path.exists():
            existing = EmbeddedKafka.load(self.directory)
            if existing.running() and len(existing.nodes) != self.brokers:
                raise BrokerError(
                    f"A {len(existing.nodes)}-broker cluster is already running in {self.directory}; "
                    f"stop it first ('python -m kafka_eos_tools broker stop --dir {self.directory}') to start "
                    f"{self.brokers}."
                )
            if existing.running() and (existing.security, existing.acls) != (self.security, self.acls):
                raise BrokerError(
                    f"A cluster with security {existing.security.value!r} (acls={existing.acls}) is already running "
                    f"in {self.directory}; stop it first to start one with {self.security.value!r} (acls={self.acls})."
                )
            self.nodes, self.cluster_id = existing.nodes, existing.cluster_id
            self.kafka_version = existing.kafka_version
        else:
            self._plan()
        if self.material is not None:
            self.material.generate(tls=self.security.tls)
        try:
            for node in self.nodes:
                if not is_alive(node.pid):
                    self._launch(node)
            self._save()
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def _plan(self) -> None:
        self.cluster_id = _random_cluster_id()
        ports = self._pick_ports()
        secured = self.security is not sec.Security.PLAINTEXT
        self.nodes = [
            Node(node_id=i + 1, port=ports[i], controller_port=ports[self.brokers + i],
                 directory=str(self.directory / f"node-{i + 1}"),
                 internal_port=ports[2 * self.brokers + i] if secured else None)
            for i in range(self.brokers)
        ]

    def _pick_ports(self) -> list[int]:
        count = (2 if self.security is sec.Security.PLAINTEXT else 3) * self.brokers
        if self.base_port is None:
            return [free_port() for _ in range(count)]
        ports = list(range(self.base_port, self.base_port + count))
        busy = [p for p in ports if port_in_use(p)]
        if busy:
            raise BrokerError(
                f"Port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use; choose another base port "
                "or omit it to pick free ports."
            )
        return ports

    def _launch(self, node: Node) -> None:
        if self._classpath is None:
            self._classpath = maven.classpath(distribution.kafka_jars(self.kafka_version))
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        node.path.mkdir(parents=True, exist_ok=True)
        secured = sec.listener_properties(self.security, self.material, self.acls)
        props = node.path / "server.properties"
        props.write_text(server_properties(node, voters, self.brokers, self.security.protocol, secured))
        if self.material is not None:
            props.chmod(0o600)  # it holds the PLAIN users' and the keystores' passwords
        scram = sec.scram_format_args(self.material) if self.security.sasl and self.material else []
        format_storage(node, self._classpath, self.cluster_id or "", scram)
        busy = _ports_in_use(node)
        if busy:
            raise BrokerError(f"Port(s) {busy} for Kafka node {node.node_id} are in use on 127.0.0.1.")
        start_process(node, self._classpath)

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until every node listens and a transactional write commits."""
        from kafka_eos_tools.broker.readiness import check_transactional_write

        deadline = time.monotonic() + timeout
        for node in self.nodes:
            while not _listening(node.port):
                self._check_alive(node)
                if time.monotonic() > deadline:
                    raise BrokerError(f"Kafka node {node.node_id} did not listen on port {node.port} "
                                      f"within {timeout:.0f}s. Log tail:\n{log_tail(node)}")
                time.sleep(0.2)
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            for node in self.nodes:
                self._check_alive(node)
            try:
                check_transactional_write(self.bootstrap, self.brokers, timeout=30, conf=self.admin_config())
                return
            except Exception as exc:  # the cluster may still be electing leaders
                last_error = exc
                time.sleep(1.0)
        raise BrokerError(f"The embedded Kafka did not accept a transactional write within {timeout:.0f}s: "
                          f"{last_error}")

    # -- clients of a secured cluster -----------------------------------------------
    def _check_acls(self) -> None:
        if self.acls and not self.security.authenticates:
            raise BrokerError(f"ACLs need clients with names; security {self.security.value!r} has none "
                              "(use sasl, sasl_ssl or mtls).")

    def admin_config(self) -> dict[str, str]:
        """librdkafka settings of the super user (``admin``), bootstrap included."""
        return self.client_config(sec.ADMIN)

    def client_config(self, user: str = sec.ADMIN, mechanism: str = "SCRAM-SHA-512",
                      keystore: str = "PKCS12") -> dict[str, str]:
        """librdkafka settings (as confluent-kafka takes them) for ``user`` (admin, alice,
        bob). ``mechanism``: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 on SASL listeners;
        ``keystore``: PKCS12 or PEM client certificate on mtls."""
        return sec.librdkafka_config(self.security, self.material, self.bootstrap, user, mechanism, keystore)

    def java_options(self, user: str = sec.ADMIN, mechanism: str = "SCRAM-SHA-512",
                     truststore: str = "PKCS12") -> dict[str, str]:
        """The Spark option map in the Java client's names (``kafka.security.protocol``,
        ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``, ...) for ``user``."""
        return sec.java_options(self.security, self.material, self.bootstrap, user, mechanism, truststore)

    def create_acls(self, user: str, *, read_topics: tuple[str, ...] | list[str] = (),
                    write_topics: tuple[str, ...] | list[str] = (), describe_topics: tuple[str, ...] | list[str] = (),
                    groups: tuple[str, ...] | list[str] = (),
                    transactional_id_prefix: str | None = None, idempotent_write: bool = False,
                    timeout: float = 30.0) -> None:
        """Allow ``user`` what a pipeline needs (see :func:`.security.pipeline_acls`)."""
        from confluent_kafka.admin import AdminClient

        from kafka_eos_ds.kafka.settings import logged

        bindings = sec.pipeline_acls(user, read_topics=read_topics, write_topics=write_topics,
                                     describe_topics=describe_topics, groups=groups,
                                     transactional_id_prefix=transactional_id_prefix,
                                     idempotent_write=idempotent_write)
        if not bindings:
            return
        admin = AdminClient(logged(self.admin_config()))
        for binding, future in admin.create_acls(bindings, request_timeout=timeout).items():
            try:
                future.result(timeout)
            except Exception as exc:
                raise BrokerError(f"Creating the ACL {binding} failed: {exc}") from exc

    def _check_alive(self, node: Node) -> None:
        if not is_alive(node.pid):
            tail = log_tail(node)
            hint = " (port already in use)" if "Address already in use" in tail else ""
            raise BrokerError(f"Kafka node {node.node_id} exited during start-up{hint}. Log tail:\n{tail}")

    def stop(self) -> None:
        """Stop every node: controlled shutdown first, SIGKILL after a timeout."""
        # Brokers go first, in reverse, so the last nodes still have a quorum while
        # the others shut down cleanly; the final one is killed if it waits forever.
        for node in reversed(self.nodes):
            stop_process(node, timeout=15.0 if node is not self.nodes[0] else 5.0)
        if self.state_path.parent.exists() and self.nodes:
            self._save()

    def kill(self, node_id: int) -> None:
        """Hard-kill one node (SIGKILL), as a crash would."""
        kill_process(self._node(node_id))
        self._save()

    def stop_node(self, node_id: int) -> None:
        """Cleanly stop one node (SIGTERM, controlled shutdown)."""
        stop_process(self._node(node_id))
        self._save()

    def restart(self, node_id: int, timeout: float = 120.0, wait: bool = True) -> None:
        """Start a stopped or killed node again with its data and ports; with ``wait``,
        return once it listens."""
        node = self._node(node_id)
        deadline = time.monotonic() + timeout
        if not is_alive(node.pid):
            # Right after a kill the dead node's sockets may hold its ports for a while
            # (connections it had accepted, closing); the same ports are needed again.
            while _ports_in_use(node) and time.monotonic() < deadline:
                time.sleep(0.2)
            self._launch(node)
            self._save()
        while wait and not _listening(node.port):
            self._check_alive(node)
            if time.monotonic() > deadline:
                raise BrokerError(f"Kafka node {node_id} did not come back within {timeout:.0f}s.")
            time.sleep(0.2)

    def _node(self, node_id: int) -> Node:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise BrokerError(f"No node {node_id} in this cluster (nodes: {[n.node_id for n in self.nodes]}).")

    def __enter__(self) -> EmbeddedKafka:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _ports_in_use(node: Node) -> list[int]:
    """The node's ports (client, controller, internal) that something on 127.0.0.1 holds."""
    return [p for p in (node.port, node.controller_port, node.internal_port) if p and port_in_use(p)]


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _random_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
