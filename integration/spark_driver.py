"""A SparkSession in its own driver process, driven line by line from a test.

A test that needs a session with settings fixed at start (Hive support pointed at a
metastore, say) cannot share the suite's in-process session: there is one SparkContext
per process. ``SparkDriver(conf)`` starts ``python -m integration.spark_driver``, which
builds the session and then runs one snippet of Python per request (with ``spark`` in
scope; the snippet sets ``result``) and answers with ``result`` as one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent


class SparkDriver:
    def __init__(self, conf: dict[str, str], log_file: Path, env: dict[str, str] | None = None) -> None:
        self.log_file = log_file
        environment = {**os.environ, **(env or {}),
                       "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
        with open(log_file, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "integration.spark_driver", json.dumps(conf)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         cwd=_ROOT, env=environment, text=True)
        self.run("result = spark.version")  # waits for the session

    def run(self, code: str) -> Any:
        """Run ``code`` in the driver; returns what it left in ``result``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(code) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"The Spark driver exited. Log tail:\n{self._tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"The Spark driver failed: {answer['error']}")
        return answer["result"]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def _tail(self) -> str:
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-30:])

    def __enter__(self) -> SparkDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(conf: dict[str, str]) -> None:
    from kafka_eos_tools.spark_session import spark_builder

    builder = spark_builder("kafka-eos-storage")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        for line in sys.stdin:
            scope: dict[str, Any] = {"spark": spark, "result": None}
            try:
                exec(json.loads(line), scope)
                answer = {"result": scope["result"]}
            except Exception as exc:  # reported to the test, which fails with it
                answer = {"error": f"{type(exc).__name__}: {exc}"[:4000]}
            print(json.dumps(answer, default=str), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
