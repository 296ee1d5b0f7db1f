#!/usr/bin/env python3
"""Per-module time tables, in markdown, from pytest's JUnit XML files (stdlib only).

    scripts/times.py .kafka-eos/results/junit-*.xml

One table per file (a file is one pytest run; scripts/test.sh names them
``junit-<run>.xml``): module, tests, passed, failed, skipped, seconds and share of the
run, slowest module first. A test's seconds are pytest's: setup, call and teardown, so a
module's row includes the fixtures it started (a session fixture counts where it was
first used).

    scripts/times.py --failures .kafka-eos/results/junit-*.xml

Each failed test of those runs on one line, with the first line of its failure: CI keeps
only the end of a run's output, and scripts/test.sh prints this last.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

COLUMNS = ("passed", "failed", "skipped")


def module_of(classname: str) -> str:
    """``integration.test_sink_crash`` (or ``tests.test_x.TestCase``) -> the file path:
    the dotted parts up to the first module named ``test_*``."""
    parts = classname.split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: i + 1]) + ".py"
    return "/".join(parts) + ".py"


def outcome(case: ET.Element) -> str:
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    if case.find("skipped") is not None:
        return "skipped"
    return "passed"


def table(path: Path) -> str:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    rows: dict[str, dict] = defaultdict(lambda: {"tests": 0, "seconds": 0.0, **{c: 0 for c in COLUMNS}})
    wall = 0.0
    for suite in suites:
        wall += float(suite.get("time", 0))
        for case in suite.iter("testcase"):
            row = rows[module_of(case.get("classname", ""))]
            row["tests"] += 1
            row[outcome(case)] += 1
            row["seconds"] += float(case.get("time", 0))
    total = sum(r["seconds"] for r in rows.values())
    run = path.stem.removeprefix("junit-")
    lines = [f"{run}: {sum(r['tests'] for r in rows.values())} tests, {total:.0f} s in tests, "
             f"{wall:.0f} s of pytest",
             "",
             "| module | tests | passed | failed | skipped | seconds | share |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for module, r in sorted(rows.items(), key=lambda item: -item[1]["seconds"]):
        share = 100 * r["seconds"] / total if total else 0.0
        lines.append(f"| {module} | {r['tests']} | {r['passed']} | {r['failed']} | {r['skipped']} "
                     f"| {r['seconds']:.1f} | {share:.1f}% |")
    return "\n".join(lines) + "\n"


def failures(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    run = path.stem.removeprefix("junit-")
    found = []
    for case in root.iter("testcase"):
        if outcome(case) != "failed":
            continue
        failure = case.find("failure")
        failure = failure if failure is not None else case.find("error")
        message = (failure.get("message") or failure.text or "").strip().splitlines()
        first = message[0][:300] if message else ""
        test = f"{module_of(case.get('classname', ''))}::{case.get('name', '')}"
        found.append(f"FAILED [{run}] {test}: {first}")
    return found


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    list_failures = argv[0] == "--failures"
    if list_failures:
        argv = argv[1:]
    missing = [a for a in argv if not Path(a).is_file()]
    if missing:
        print(f"times: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if list_failures:
        for line in (line for a in argv for line in failures(Path(a))):
            print(line)
        return 0
    print("\n".join(table(Path(a)) for a in argv), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
