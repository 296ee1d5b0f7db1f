"""Peak memory of Spark's Python workers during one measured run.

The workers are forks of the pyspark daemon under the driver's JVM (reused across
tasks). A sampler thread reads their resident set size from /proc every 100 ms and
reports how far the sum over all workers rose above what it was when the run began
(``peak_total``), and the largest single worker seen (``peak_one``). The built-in
connector runs no Python code, so its rise is about zero.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from kafka_eos_tools.demo.processes import descendants


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _is_worker(pid: int) -> bool:
    """A fork of the daemon (the daemon itself holds no task data)."""
    try:
        if b"pyspark.daemon" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return False
        parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        return b"pyspark.daemon" in Path(f"/proc/{parent}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False


class WorkerMemory(threading.Thread):
    def __init__(self, root: int | None = None, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root = root or os.getpid()
        self.interval = interval
        self.peak_total = 0
        self.peak_one = 0
        self._halt = threading.Event()

    def _sample(self) -> list[int]:
        return [_rss_bytes(pid) for pid in descendants(self.root) if _is_worker(pid)]

    def run(self) -> None:
        baseline = sum(self._sample())
        while not self._halt.is_set():
            sizes = self._sample()
            if sizes:
                self.peak_total = max(self.peak_total, sum(sizes) - baseline)
                self.peak_one = max(self.peak_one, max(sizes))
            self._halt.wait(self.interval)

    def __enter__(self) -> "WorkerMemory":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self.join(2)
