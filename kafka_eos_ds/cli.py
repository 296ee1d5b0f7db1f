"""The product's operator commands: the ``kafka-eos`` console script (a checkout's
``python -m kafka_eos_tools`` adds the tooling's, see :mod:`kafka_eos_tools.cli`).

    kafka-eos transactions list|abort --bootstrap B --prefix P [--family F] [--json]
        [-X key=value ...] [--command-config client.properties]

The client settings are those of the sink's ``kafka.*`` options, in librdkafka's or the
Java client's spelling (``--command-config`` is a Java properties file, as Kafka's tools
take).

Each command group is one function that adds its sub-parser; errors of the package's
exception tree are printed as one line (no traceback) with exit status 2.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable, Sequence

from kafka_eos_ds.errors import ConfigError, KafkaEosError

CommandGroup = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _transactions_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = sub.add_parser("transactions", help="list, finish or abort the transactions of a kafka_eos sink")
    actions = cmd.add_subparsers(dest="action", required=True)
    for name, doc in (("list", "every transactional id of the sink, with its state"),
                      ("finish", "commit what the sink's writers decided but did not finish (safe at any time)"),
                      ("abort", "abort (fence) the sink's open transactions; stop the query first")):
        action = actions.add_parser(name, help=doc)
        action.add_argument("--bootstrap", required=True)
        action.add_argument("--prefix", required=True, help="the sink's transactionalIdPrefix")
        action.add_argument("--json", action="store_true")
        if name == "finish":
            action.add_argument("--commit-log-topic", default=None, help="the sink option commitLogTopic")
        else:
            action.add_argument("--family", default=None,
                                help="only the ids of this family (as 'list' shows it: a batch job's 'j...'; "
                                     "'j*': every batch job's; '|s*': the streaming query's own, every run's "
                                     "'s...' and earlier versions' '' ('|' separates alternatives))")
        add_client_settings(action)
        action.set_defaults(run=_transactions)


def add_client_settings(parser: argparse.ArgumentParser) -> None:
    """The Kafka client settings options every command that connects takes."""
    parser.add_argument("-X", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a Kafka client setting (librdkafka or Java client name), repeatable")
    parser.add_argument("--command-config", metavar="FILE",
                        help="a Java properties file of Kafka client settings (security etc.)")


def client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The client settings of ``args``: --bootstrap, the file, then -X (a later one wins),
    translated and checked like the connector's ``kafka.*`` options."""
    from kafka_eos_ds.kafka.java_settings import translate
    from kafka_eos_ds.kafka.settings import ClientParams, check_settings

    given = {"bootstrap.servers": args.bootstrap}
    if args.command_config:
        given.update(read_properties(args.command_config))
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-X takes KEY=VALUE, got {item.split('=')[0]!r}...")
        given[key.strip()] = value
    conf = translate(given)
    check_settings(conf, "producer")
    return ClientParams(conf)


def read_properties(path: str) -> dict[str, str]:
    """A Java properties file (Kafka tools' ``--command-config``): ``key=value``,
    ``key: value`` or ``key value`` lines, ``#``/``!`` comments, a trailing backslash
    continuing a line, backslash escapes."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"Cannot read the client settings file {path!r}: {exc.strerror}.") from None
    out: dict[str, str] = {}
    pending = ""
    for raw in lines:
        line = pending + (raw.lstrip() if pending else raw.strip())
        if not pending and (not line or line[0] in "#!"):
            continue
        if (len(line) - len(line.rstrip("\\"))) % 2 == 1:  # an odd number of trailing backslashes
            pending = line[:-1]
            continue
        pending = ""
        split = re.match(r"((?:[^\\=:\s]|\\.)+)\s*[=:\s]\s*(.*)$", line)
        key, value = (split.group(1), split.group(2)) if split else (line, "")
        out[_unescape(key)] = _unescape(value)
    return out


def _unescape(text: str) -> str:
    named = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return re.sub(r"\\(.)", lambda m: named.get(m.group(1), m.group(1)), text)


def _transactions(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from kafka_eos_ds.kafka_sink import abort_transactions, list_transactions
    from kafka_eos_ds.kafka_sink.transactions_tool import finish_decided

    conf = client_settings(args)
    if args.action == "finish":
        finished = finish_decided(conf, args.prefix, *([args.commit_log_topic] if args.commit_log_topic else []))
        if args.json:
            print(json.dumps([asdict(w) for w in finished], indent=2))
        for w in finished if not args.json else ():
            print(f"{w.writer:<48} batch {w.batch_id:<8} {w.transactions} transaction(s) {w.outcome}")
        print(f"{len(finished)} decided write(s) finished for prefix {args.prefix!r}", file=sys.stderr)
        return 0 if all(w.outcome == "committed" for w in finished) else 1
    found = (list_transactions if args.action == "list" else abort_transactions)(conf, args.prefix,
                                                                                  family=args.family)
    if args.json:
        print(json.dumps([asdict(t) for t in found], indent=2))
    else:
        verb = "aborted" if args.action == "abort" else "found"
        for t in found:
            print(f"{t.transactional_id:<40} {t.state:<16} producer {t.producer_id} epoch {t.producer_epoch}")
        print(f"{len(found)} transaction(s) {verb} for prefix {args.prefix!r}", file=sys.stderr)
    return 0


# The product's command groups.
COMMAND_GROUPS: list[CommandGroup] = [_transactions_commands]


def build_parser(groups: Sequence[CommandGroup] = COMMAND_GROUPS, prog: str = "kafka-eos") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="kafka_eos: exactly-once Kafka for Spark")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in groups:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None, groups: Sequence[CommandGroup] = COMMAND_GROUPS,
         prog: str = "kafka-eos") -> int:
    args = build_parser(groups, prog).parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KafkaEosError as exc:
        print(f"kafka-eos: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
