"""Starting a driver process and killing it with everything it started.

A Spark driver started from Python owns a JVM, which owns Python worker daemons. A crash
of the machine kills them all at once; ``kill_tree`` does the same with SIGKILL, so
nothing of the old run survives to write after the restart (except what the sink must
fence anyway).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence


def children_of() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    tree, found, stack = children_of(), [], [pid]
    while stack:
        for child in tree.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Signal a process and all its descendants; returns the pids signalled."""
    victims = [pid, *descendants(pid)]
    for victim in victims:
        signal_quietly(victim, sig)
    return victims


def signal_quietly(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def is_python_worker(pid: int) -> bool:
    """A PySpark Python worker (forked by the worker daemon), not the daemon itself."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        parent_cmd = Path(f"/proc/{parent}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    # Workers are forks of the daemon: same command line as their parent.
    return b"pyspark.daemon" in b" ".join(cmdline) and b"pyspark.daemon" in parent_cmd


def start(cmd: Sequence[str], log_path: Path, env: dict | None = None) -> subprocess.Popen:
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


def wait_gone(pids: Sequence[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)


def naming(text: str) -> list[str]:
    """Command lines of running processes (this one aside) that mention ``text``, e.g. a
    run's directory: what a run that stops everything it started leaves none of."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(f"{entry.name}: {cmdline[:200]}")
    return found
