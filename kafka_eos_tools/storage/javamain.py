"""Small Java launchers, compiled once with ``javac`` into the cache.

The servers' own ``main`` methods either bind every interface (the Hive metastore) or
do not exist (MiniDFSCluster is a test class); a launcher of a few lines builds the
server with loopback addresses instead. Its class files are cached by a digest of the
source and the classpath, so a changed launcher or a new jar set compiles again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from kafka_eos_tools.broker import maven
from kafka_eos_tools.storage import ServerError
from kafka_eos_tools.storage.process import require


def compiled(class_name: str, source: str, classpath: str) -> Path:
    """The directory holding ``class_name`` (a class in the default package) compiled
    from ``source`` against ``classpath``; compiled on first use."""
    digest = hashlib.sha256((source + "\n" + classpath).encode()).hexdigest()[:12]
    target = maven.cache_root() / "classes" / f"{class_name}-{digest}"
    if (target / f"{class_name}.class").exists():
        return target
    javac = _javac()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kafka-eos-javac-", dir=target.parent) as work:
        src = Path(work, f"{class_name}.java")
        src.write_text(source)
        out = Path(work, "classes")
        proc = subprocess.run([javac, "-nowarn", "-cp", classpath, "-d", str(out), str(src)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise ServerError(f"Compiling the {class_name} launcher failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        if target.exists():
            shutil.rmtree(target)
        os.replace(out, target)  # whole or absent: another start never sees half a directory
    return target


def java() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH."""
    return _jdk_tool("java")


def _javac() -> str:
    return _jdk_tool("javac")


def _jdk_tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", name).exists():
        return str(Path(home, "bin", name))
    return require(name, "the embedded HDFS and Hive metastore need a JDK 17 or newer (java and javac); install "
                         "one (e.g. 'apt-get install openjdk-17-jdk-headless') or name existing servers with "
                         "KAFKA_EOS_HDFS / KAFKA_EOS_METASTORE.")
