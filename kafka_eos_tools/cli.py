"""``python -m kafka_eos_tools``: the tooling's commands plus the product's operator commands.

    python -m kafka_eos_tools broker start [--brokers N] [--dir DIR] [--kafka-version V] [--port P]
                           [--security plaintext|sasl|ssl|mtls|sasl_ssl] [--acls]
    python -m kafka_eos_tools broker stop  [--dir DIR]
    python -m kafka_eos_tools broker kill|restart --node N [--dir DIR]
    python -m kafka_eos_tools broker status [--dir DIR]
    python -m kafka_eos_tools demo [--bootstrap B] [--records N] [--crashes K] [--brokers N] ...
    python -m kafka_eos_tools demo --table [--hdfs URL] [--metastore URI] [--records N] [--crashes K] ...
    python -m kafka_eos_tools audit --bootstrap B --input IN --output OUT [--json]
    python -m kafka_eos_tools transactions list|finish|abort ...   (the product's: kafka_eos_ds.cli)

Each command group is one function that adds its sub-parser; the product's groups come
from :data:`kafka_eos_ds.cli.COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from kafka_eos_ds import cli as product_cli
from kafka_eos_ds.errors import ConfigError
from kafka_eos_tools.broker.security import Security

DEFAULT_BROKER_DIR = ".kafka-eos/broker"


def _broker_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    broker = sub.add_parser("broker", help="run an embedded Apache Kafka (KRaft) on 127.0.0.1")
    actions = broker.add_subparsers(dest="action", required=True)

    start = actions.add_parser("start", help="start (or reuse) a cluster; prints the bootstrap address last")
    start.add_argument("--brokers", type=int, default=1, help="number of nodes (3 gives RF 3, min ISR 2)")
    start.add_argument("--dir", default=DEFAULT_BROKER_DIR, help="state, data and logs (default: %(default)s)")
    start.add_argument("--kafka-version", default=None, help="pinned Kafka line: 4.1 (default), 4.4 or 3.9")
    start.add_argument("--port", type=int, default=None, help="first client port (default: free ports)")
    start.add_argument("--security", default="plaintext", choices=[s.value for s in Security],
                       help="client listener: plaintext (default), sasl (PLAIN, SCRAM-SHA-256/512), ssl, "
                            "mtls (client certificates required) or sasl_ssl; credentials in DIR/security")
    start.add_argument("--acls", action="store_true",
                       help="StandardAuthorizer, no access without an ACL (admin is the super user)")
    start.set_defaults(run=_broker_start)

    stop = actions.add_parser("stop", help="stop every node started in --dir")
    stop.add_argument("--dir", default=DEFAULT_BROKER_DIR)
    stop.set_defaults(run=_broker_stop)

    status = actions.add_parser("status", help="show nodes, ports and whether they run")
    status.add_argument("--dir", default=DEFAULT_BROKER_DIR)
    status.set_defaults(run=_broker_status)

    for name, doc in (("kill", "SIGKILL one node"), ("restart", "start a stopped or killed node again")):
        cmd = actions.add_parser(name, help=doc)
        cmd.add_argument("--node", type=int, required=True)
        cmd.add_argument("--dir", default=DEFAULT_BROKER_DIR)
        cmd.set_defaults(run=_broker_node_action)


def _broker_start(args: argparse.Namespace) -> int:
    import time

    from kafka_eos_tools.broker.cluster import EmbeddedKafka

    started = time.monotonic()
    cluster = EmbeddedKafka(args.dir, brokers=args.brokers, kafka_version=args.kafka_version,
                            base_port=args.port, security=args.security, acls=args.acls)
    bootstrap = cluster.start()
    print(f"Kafka {cluster.kafka_version}, {len(cluster.nodes)} node(s), ready in "
          f"{time.monotonic() - started:.1f}s; state in {cluster.directory}", file=sys.stderr)
    if cluster.material is not None:
        # Where the secrets are, never the secrets themselves.
        print(f"{cluster.security.protocol} client listener{' with ACLs' if cluster.acls else ''}; users "
              f"admin (super user), alice, bob; passwords in {cluster.material.credentials_path}, certificates "
              f"in {cluster.material.directory}", file=sys.stderr)
    print(bootstrap, flush=True)
    return 0


def _broker_stop(args: argparse.Namespace) -> int:
    from kafka_eos_tools.broker.cluster import EmbeddedKafka

    cluster = EmbeddedKafka.load(args.dir)
    cluster.stop()
    left = cluster.running()
    if left:
        print(f"still running: {[n.pid for n in left]}", file=sys.stderr)
        return 1
    print(f"stopped {len(cluster.nodes)} node(s) in {cluster.directory}", file=sys.stderr)
    return 0


def _broker_status(args: argparse.Namespace) -> int:
    from kafka_eos_tools.broker.cluster import EmbeddedKafka
    from kafka_eos_tools.broker.node import is_alive

    cluster = EmbeddedKafka.load(args.dir)
    for node in cluster.nodes:
        state = f"running (pid {node.pid})" if is_alive(node.pid) else "stopped"
        print(f"node {node.node_id}  127.0.0.1:{node.port}  {state}")
    print(cluster.bootstrap)
    return 0 if cluster.running() else 1


def _broker_node_action(args: argparse.Namespace) -> int:
    from kafka_eos_tools.broker.cluster import EmbeddedKafka

    cluster = EmbeddedKafka.load(args.dir)
    if args.action == "kill":
        cluster.kill(args.node)
    else:
        cluster.restart(args.node)
    return 0


def _demo_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="run the exactly-once pipeline with driver crashes, then audit it")
    demo.add_argument("--bootstrap", help="use this Kafka instead of starting an embedded one")
    demo.add_argument("--brokers", type=int, default=1, help="embedded Kafka nodes (default: %(default)s)")
    demo.add_argument("--records", type=int, default=20_000,
                      help="input records, at least: more are fed while crashes remain (default: %(default)s)")
    demo.add_argument("--crashes", type=int, default=3, help="driver kills (SIGKILL) before the final run")
    demo.add_argument("--seed", type=int, default=None, help="random seed for the crash moments")
    demo.add_argument("--workdir", default=".kafka-eos/demo", help="checkpoint, logs, embedded Kafka")
    demo.add_argument("--json", action="store_true", help="print the audit as JSON")
    table = demo.add_argument_group("Kafka to a Hive table (--table)")
    table.add_argument("--table", action="store_true",
                       help="write a partitioned table on HDFS registered in a Hive metastore instead of a topic, "
                            "and audit it through the metastore and over its path")
    table.add_argument("--hdfs", help="with --table: use this HDFS (hdfs://host:port) instead of an embedded one")
    table.add_argument("--metastore", help="with --table: use this metastore (thrift://host:port) instead of an "
                                           "embedded one")
    demo.set_defaults(run=_demo)


def _demo(args: argparse.Namespace) -> int:
    import logging
    import random
    import shutil
    from pathlib import Path

    from kafka_eos_tools.demo.chaos import ChaosPlan, run_chaos

    if (args.hdfs or args.metastore) and not args.table:
        raise ConfigError("--hdfs and --metastore name the stores of the table variant; add --table.")
    workdir = Path(args.workdir).resolve()
    run_dir = workdir / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    # Client log lines (librdkafka's among them) go to a file, not over the progress bar.
    workdir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=workdir / "demo.log", level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.table:
        return _demo_table(args, workdir, run_dir)
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from kafka_eos_tools.broker.cluster import EmbeddedKafka

        print(f"starting an embedded Apache Kafka ({args.brokers} node(s)) ...", file=sys.stderr)
        cluster = EmbeddedKafka(workdir / "kafka", brokers=args.brokers)
        bootstrap = cluster.start()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    plan = ChaosPlan(bootstrap=bootstrap, workdir=run_dir, records=args.records, bounces=["driver-hard"] * args.crashes,
                     seed=seed, replication=min(3, args.brokers if cluster else 1), cluster=cluster)
    bar = _ProgressBar()
    try:
        result = run_chaos(plan, bar.update)
    finally:
        bar.close()
        if cluster is not None:
            cluster.stop()
    if args.json:
        print(result.report.to_json())
    else:
        print(f"demo: {result.fed:,} records, {result.crashes} driver crashes, {result.runs} runs, "
              f"{result.seconds:.0f}s (seed {seed})")
        print(result.report.table())
        print(f"tailing read_committed consumer: {result.tail_records:,} records read while the job ran and "
              f"crashed, {result.tail_duplicates} duplicates")
    return 0 if result.ok else 1


def _demo_table(args: argparse.Namespace, workdir, run_dir) -> int:
    """Kafka -> Spark -> a partitioned table on HDFS in a Hive metastore (docs/demo.md)."""
    import json
    import random

    from kafka_eos_tools.demo.table_stores import TableStores, missing_clients

    missing = missing_clients()
    if missing:
        raise ConfigError(f"demo --table needs {', '.join(missing)}: pip install -e '.[hdfs,hive]'")
    from kafka_eos_tools.demo.table_chaos import TablePlan, run_table_chaos

    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    with TableStores(run_dir / "servers", workdir / "kafka", args.brokers, args.bootstrap, args.hdfs,
                     args.metastore) as stores:
        assert stores.bootstrap and stores.hdfs and stores.metastore
        plan = TablePlan(bootstrap=stores.bootstrap, store=stores.hdfs, metastore=stores.metastore,
                         workdir=run_dir / "pipeline", records=args.records, crashes=args.crashes, seed=seed,
                         replication=stores.replication)
        bar = _ProgressBar()
        try:
            result = run_table_chaos(plan, bar.update)
        finally:
            bar.close()
    if args.json:
        print(json.dumps({**result.audit.to_dict(), "crashes": result.crashes, "runs": result.runs,
                          "seconds": round(result.seconds, 1), "servers_seconds": round(stores.start_seconds, 1),
                          "seed": seed}, indent=2, sort_keys=True))
    else:
        print(f"demo --table: {result.fed:,} records, {result.crashes} driver kills (SIGKILL), {result.runs} runs, "
              f"{result.seconds:.0f}s after {stores.start_seconds:.0f}s of server start-up (seed {seed})\n"
              f"table {result.audit.table} at {result.audit.location}")
        print(result.audit.table_text())
    return 0 if result.ok else 1


class _ProgressBar:
    """One line on stderr, redrawn in place on a terminal, every 5 s otherwise."""

    def __init__(self) -> None:
        import time

        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.clock = time.monotonic

    def update(self, message: str, fraction: float) -> None:
        now = self.clock()
        if not self.tty and now - self.last < 5:
            return
        self.last = now
        filled = int(30 * fraction)
        line = f"[{'#' * filled}{'.' * (30 - filled)}] {fraction:4.0%}  {message}"
        print(("\r" + line.ljust(90)) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr,
              flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def _audit_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser("audit", help="exactly-once audit of an output topic against its input topic")
    cmd.add_argument("--bootstrap", required=True)
    cmd.add_argument("--input", required=True, help="input topic (records carry unique ids)")
    cmd.add_argument("--output", required=True, help="output topic, read as read_committed")
    cmd.add_argument("--id-from", default="value", help="value (text before the separator), key, or header:NAME")
    cmd.add_argument("--separator", default="|", help="id separator in the value (default: %(default)s)")
    cmd.add_argument("--json", action="store_true")
    product_cli.add_client_settings(cmd)
    cmd.set_defaults(run=_audit)


def _audit(args: argparse.Namespace) -> int:
    from kafka_eos_tools.audit import audit

    report = audit(product_cli.client_settings(args), args.input, args.output, args.id_from, args.separator)
    print(report.to_json() if args.json else report.table())
    return 0 if report.ok else 1


# The tooling's command groups, after the product's own.
COMMAND_GROUPS: list[product_cli.CommandGroup] = [
    _broker_commands,
    _demo_commands,
    _audit_commands,
]


def main(argv: Sequence[str] | None = None) -> int:
    return product_cli.main(argv, groups=[*COMMAND_GROUPS, *product_cli.COMMAND_GROUPS],
                            prog="python -m kafka_eos_tools")


if __name__ == "__main__":
    sys.exit(main())
