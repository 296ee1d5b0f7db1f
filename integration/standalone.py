"""A Spark standalone cluster (one master, N workers) run from the installed pyspark,
for the cluster integration test.

Every daemon binds 127.0.0.1 on free ports, keeps its work and scratch space under the
given directory and is started as a child process whose pid is kept, so ``stop`` ends
exactly what was started (with the executors the workers launched) and nothing else.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import time
import urllib.request
import venv
from pathlib import Path

import pyspark

from kafka_eos_tools.broker.cluster import free_port
from kafka_eos_tools.demo import processes

SPARK_HOME = Path(pyspark.__file__).parent
EXECUTOR_CLASS = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def spark_env(workdir: Path) -> dict[str, str]:
    """The environment of every Spark process of the test: loopback only, an empty conf
    dir (no user settings leak in), the installed pyspark's Spark (not another one a
    SPARK_HOME names) and no inherited PYTHONPATH (executors would put it ahead of the
    shipped zip)."""
    conf_dir = workdir / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_CONF_DIR=str(conf_dir),
               SPARK_LOCAL_DIRS=str(workdir / "scratch"), SPARK_DAEMON_MEMORY="256m")
    return env


class StandaloneCluster:
    def __init__(self, workdir: Path, workers: int = 2, worker_memory: str = "1g",
                 hosts: tuple[str, ...] = ()) -> None:
        """``hosts``: one loopback address per worker (default: all on 127.0.0.1). Workers on
        different addresses are different hosts to Spark, which places a speculative copy
        of a task only on a host not already running it."""
        self.workdir, self.workers, self.worker_memory = workdir, workers, worker_memory
        self.hosts = hosts or ("127.0.0.1",) * workers
        self.port, self.webui = free_port(), free_port()
        self.master: subprocess.Popen | None = None
        self.worker_procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def logs(self) -> list[Path]:
        return [self.workdir / "master.log"] + [self.workdir / f"worker-{i}.log" for i in range(self.workers)]

    def start(self, timeout: float = 90.0) -> str:
        env = spark_env(self.workdir)
        # The REST submission server would take its fixed port 6066; nothing here uses it.
        env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        # spark-class execs java, so each pid kept here is the daemon's JVM.
        self.master = processes.start(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(self.port), "--webui-port", str(self.webui)], self.logs()[0], env)
        for i in range(self.workers):
            work = self.workdir / f"worker-{i}"
            work.mkdir(parents=True, exist_ok=True)
            # The worker's executors inherit SPARK_LOCAL_IP: they bind the worker's address too.
            worker_env = {**env, "SPARK_LOCAL_IP": self.hosts[i]}
            self.worker_procs.append(processes.start(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", self.hosts[i], "--port", "0",
                 "--webui-port", str(free_port()), "--cores", "1", "--memory", self.worker_memory,
                 "--work-dir", str(work), self.url], self.logs()[i + 1], worker_env))
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            dead = [p for p in [self.master, *self.worker_procs] if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                reason = "a daemon exited" if dead else f"not {self.workers} ALIVE workers within {timeout:.0f}s"
                raise RuntimeError(f"the Spark standalone cluster did not start ({reason}):\n{self.log_tails()}")
            time.sleep(0.5)
        return self.url

    def state(self) -> dict:
        """The master's view (workers, applications), from its web UI's JSON."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=5) as answer:
                return json.load(answer)
        except (OSError, ValueError):
            return {}

    def alive_workers(self) -> int:
        return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")

    def executors(self) -> list[int]:
        """Pids of the executor JVMs the workers have launched (any application)."""
        found = []
        for worker in self.worker_procs:
            for pid in processes.descendants(worker.pid):
                try:
                    if EXECUTOR_CLASS in Path(f"/proc/{pid}/cmdline").read_bytes():
                        found.append(pid)
                except OSError:
                    pass
        return found

    def executor_logs(self) -> dict[int, Path]:
        """The stderr log of each running executor JVM, by pid (the worker starts it in
        <work>/<app id>/<executor id>, the ids being on its command line)."""
        found = {}
        for i, worker in enumerate(self.worker_procs):
            for pid in processes.descendants(worker.pid):
                try:
                    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if EXECUTOR_CLASS in args:
                    executor = args[args.index(b"--executor-id") + 1].decode()
                    app = args[args.index(b"--app-id") + 1].decode()
                    found[pid] = self.workdir / f"worker-{i}" / app / executor / "stderr"
        return found

    def executor_dirs(self) -> list[Path]:
        """One directory per executor ever launched: <work>/<app id>/<executor id>."""
        return sorted(d for i in range(self.workers) for d in (self.workdir / f"worker-{i}").glob("app-*/*")
                      if d.is_dir())

    def log_tails(self) -> str:
        return "\n".join(f"--- {log.name}\n{tail(log)}" for log in self.logs())

    def stop(self) -> None:
        """SIGKILL the executors (with their Python workers), then the workers and the master."""
        for pid in self.executors():
            processes.kill_tree(pid)
        daemons = [p for p in [*self.worker_procs, self.master] if p is not None]
        victims = [pid for p in daemons for pid in processes.kill_tree(p.pid)]
        processes.wait_gone(victims, timeout=20)
        for p in daemons:
            p.wait(10)


def executor_python(dest: Path) -> str:
    """A Python that sees this venv's packages (pyspark, pyarrow, confluent-kafka, ...)
    but not the project's editable install, so a Spark task can import kafka_eos_ds
    only from the zip shipped with --py-files.

    It is a fresh venv whose one .pth line adds this venv's site-packages to sys.path: a
    directory added that way is not scanned for .pth files, so the editable install's
    own .pth (which adds the source tree) is never read."""
    venv.create(dest, with_pip=False)
    site_packages = next((dest / "lib").glob("python3*/site-packages"))
    (site_packages / "kafka-eos-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = str(dest / "bin" / "python")
    check = ("import importlib.util, pyspark, pyarrow, confluent_kafka; "
             "assert importlib.util.find_spec('kafka_eos_ds') is None, 'kafka_eos_ds is importable'")
    proc = subprocess.run([python, "-c", check], cwd=dest, env=spark_env(dest), capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"the executor Python at {python} is not as intended:\n{proc.stderr[-2000:]}")
    return python


def spark_submit() -> str:
    return str(SPARK_HOME / "bin" / "spark-submit")


if __name__ == "__main__":  # a manual check: start a cluster, print its state, stop it
    import tempfile

    cluster = StandaloneCluster(Path(tempfile.mkdtemp(prefix="spark-standalone-")))
    try:
        print(cluster.start(), json.dumps(cluster.state().get("workers"), indent=1), file=sys.stderr)
    finally:
        cluster.stop()
