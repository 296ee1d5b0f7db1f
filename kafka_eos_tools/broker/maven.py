"""Fetching pinned jars (and their dependencies) from Maven Central with Maven.

The project never downloads a tarball: it writes a throwaway POM naming the artifacts
and lets ``mvn dependency:copy-dependencies`` resolve them, so proxies, mirrors and
the local ``~/.m2`` cache configured for Maven apply as they are. The result is cached
in a directory per artifact set; a ``.complete`` marker makes a half-finished fetch
count as absent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from kafka_eos_ds.errors import BrokerError

# Some Spark POMs declare extra repositories (a cloud mirror of Central) that may be out
# of reach; unless the user has Maven settings of their own, route every repository to
# Maven Central itself.
_SETTINGS = """<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors>
    <mirror><id>central-only</id><mirrorOf>*</mirrorOf><url>https://repo.maven.apache.org/maven2</url></mirror>
  </mirrors>
</settings>
"""

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
    name dependencies the caller provides itself). Returns the directory holding the jars. Raises BrokerError naming the cause when
    Maven is missing or the registry cannot be reached.
    """
    digest = hashlib.sha256(("\n".join(sorted(artifacts)) + f"\n{transitive}").encode()).hexdigest()[:12]
    target = cache_root() / "jars" / f"{name}-{digest}"
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            "Maven ('mvn') is not on PATH; it is needed once to fetch the Kafka jars from "
            "Maven Central. Install Maven (e.g. 'apt-get install maven') or set "
            "KAFKA_EOS_BOOTSTRAP to use an existing Kafka cluster."
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
        if not (Path.home() / ".m2" / "settings.xml").exists():
            Path(work, "settings.xml").write_text(_SETTINGS)
            base += ["-s", str(Path(work, "settings.xml"))]
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
        raise BrokerError("Maven did not finish fetching jars within 15 minutes; is Maven Central reachable?") from exc
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise BrokerError(
            "Maven could not fetch " + ", ".join(artifacts) + " from Maven Central "
            "(is the registry reachable, or a mirror configured in ~/.m2/settings.xml?):\n"
            + "\n".join(tail)
        )


def classpath(directory: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted(directory.glob("*.jar")))
