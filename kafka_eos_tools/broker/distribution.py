"""Which Apache Kafka to run: pinned versions and the jars each one needs.

The broker runs from the ``kafka_2.13`` artifact and its dependencies on Maven Central,
with slf4j-simple as the log binding (the Kafka tarball's log4j setup is not on Maven
Central, and one binding for every Kafka line keeps the logs the same shape).
"""

from __future__ import annotations

from pathlib import Path

from kafka_eos_tools.broker import maven
from kafka_eos_tools.errors import BrokerError

# A 4.x line as the default, the newest release (4.4) and a 3.9 line, so compatibility
# can be tested across both transaction protocols and the broker users run now.
VERSIONS = {"4.1": "4.1.1", "4.4": "4.4.0", "3.9": "3.9.1"}
DEFAULT_VERSION = VERSIONS["4.1"]

_SLF4J = "org.slf4j:slf4j-simple:1.7.36"


def resolve_version(requested: str | None) -> str:
    """Map '4.1' / '4.1.1' / None to a pinned full version."""
    if requested is None or requested == "":
        return DEFAULT_VERSION
    if requested in VERSIONS:
        return VERSIONS[requested]
    if requested in VERSIONS.values():
        return requested
    known = ", ".join(sorted(set(VERSIONS) | set(VERSIONS.values())))
    raise BrokerError(f"Kafka version {requested!r} is not one of the pinned versions ({known}).")


def kafka_jars(version: str) -> Path:
    """Directory of the jars for one Kafka version, fetched once and cached."""
    version = resolve_version(version)
    return maven.fetch([f"org.apache.kafka:kafka_2.13:{version}", _SLF4J], f"kafka-{version}")
