"""Fetching pinned jars (and their dependencies) with Maven.

The project never downloads a tarball: it writes a throwaway POM naming the artifacts
and lets ``mvn dependency:copy-dependencies`` resolve them. Where the jars come from is
Maven's own configuration (its default repository, Maven Central, or the proxies and
mirrors of ``~/.m2/settings.xml``); the local ``~/.m2`` cache applies as it is. The
result is cached in a directory per artifact set; a ``.complete`` marker makes a
half-finished fetch count as absent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from kafka_eos_tools.errors import BrokerError

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafka-eos</groupId><artifactId>jar-fetch</artifactId><version>1</version>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def cache_root() -> Path:
    """Where fetched jars live: ``$KAFKA_EOS_CACHE`` or ``~/.cache/kafka-eos``."""
    return Path(os.environ.get("KAFKA_EOS_CACHE", Path.home() / ".cache" / "kafka-eos"))


def fetch(artifacts: Sequence[str], name: str, transitive: bool = True) -> Path:
    """Resolve ``group:artifact:version`` coordinates with dependencies into a cached dir.

    With ``transitive=False`` only the named jars are copied (for artifacts whose POMs
    name dependencies the caller provides itself). Returns the directory holding the
    jars. Raises BrokerError naming the cause when Maven is missing or the repository
    cannot be reached.
    """
    digest = hashlib.sha256(("\n".join(sorted(artifacts)) + f"\n{transitive}").encode()).hexdigest()[:12]
    target = cache_root() / "jars" / f"{name}-{digest}"
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            "Maven ('mvn') is not on PATH; it is needed once to fetch the Kafka jars. Install Maven "
            "(e.g. 'apt-get install maven') or set KAFKA_EOS_BOOTSTRAP to use an existing Kafka cluster."
        )
    deps = "\n".join(
        "    <dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version></dependency>".format(
            *coord.split(":")
        )
        for coord in artifacts
    )
    with tempfile.TemporaryDirectory(prefix="kafka-eos-mvn-") as work:
        Path(work, "pom.xml").write_text(_POM.format(deps=deps))
        staging = Path(work, "jars")
        base = [mvn, "-q", "-B", "-U"]
        if transitive:
            commands = [[*base, "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
                         "-DincludeScope=runtime"]]
        else:
            # dependency:copy never reads the artifact's dependency graph, so a POM that
            # names a missing dependency does not stop it.
            commands = [[*base, "dependency:copy", f"-Dartifact={coord}", f"-DoutputDirectory={staging}"]
                        for coord in artifacts]
        for cmd in commands:
            _run_maven(cmd, work, artifacts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(staging, target)
    (target / ".complete").write_text("\n".join(artifacts) + "\n")
    return target


def _run_maven(cmd: list[str], work: str, artifacts: Sequence[str]) -> None:
    try:
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as exc:
        raise BrokerError("Maven did not finish fetching jars within 15 minutes; is its repository (Maven Central, "
                          "or the mirror of ~/.m2/settings.xml) reachable?") from exc
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise BrokerError(
            "Maven could not fetch " + ", ".join(artifacts) + " (is Maven Central reachable, or a mirror "
            "configured in ~/.m2/settings.xml?):\n"
            + "\n".join(tail)
        )


def classpath(directory: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted(directory.glob("*.jar")))
