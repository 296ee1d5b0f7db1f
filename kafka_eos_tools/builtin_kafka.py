"""Spark's built-in Kafka connector, for side-by-side tests and benchmarks.

Maven Central lags PyPI: the ``spark-sql-kafka-0-10`` jar for the newest pyspark may
not be published yet, and the mirror reachable here lacks recent
``spark-token-provider-kafka`` POMs. So the jars are fetched one by one without their
dependency graph: the connector for the newest Spark line <= the installed pyspark that
is on Central, the token provider it needs (newest available), and the kafka-clients and
commons-pool2 versions that connector was built against. The choice is printed so a
result always says which built-in connector it compares with.
"""

from __future__ import annotations

import os
from functools import lru_cache

from kafka_eos_tools.broker import maven
from kafka_eos_tools.errors import BrokerError

# Spark line -> (connector version, token-provider version, kafka-clients, commons-pool2)
_CANDIDATES = [
    ("4.3", ("4.3.0", "4.3.0", "3.9.2", "2.13.1")),
    ("4.2", ("4.2.0", "4.0.0", "3.9.2", "2.13.1")),
    ("4.1", ("4.1.1", "4.0.0", "3.9.1", "2.12.1")),
    ("4.0", ("4.0.0", "4.0.0", "3.9.0", "2.12.0")),
]


def _artifacts(versions: tuple[str, str, str, str]) -> list[str]:
    connector, token, clients, pool = versions
    return [
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{connector}",
        f"org.apache.spark:spark-token-provider-kafka-0-10_2.13:{token}",
        f"org.apache.kafka:kafka-clients:{clients}",
        f"org.apache.commons:commons-pool2:{pool}",
    ]


@lru_cache(maxsize=1)
def builtin_kafka_jars() -> tuple[str, str]:
    """(comma-separated jar paths for ``spark.jars``, connector version)."""
    import pyspark

    installed = tuple(int(x) for x in pyspark.__version__.split(".")[:2])
    errors = []
    for line, versions in _CANDIDATES:
        if tuple(int(x) for x in line.split(".")) > installed:
            continue
        try:
            directory = maven.fetch(_artifacts(versions), f"spark-kafka-{versions[0]}", transitive=False)
        except BrokerError as exc:
            errors.append(f"{versions[0]}: {str(exc).splitlines()[0]}")
            continue
        jars = sorted(str(directory / name) for name in os.listdir(directory) if name.endswith(".jar"))
        return ",".join(jars), versions[0]
    raise BrokerError("No spark-sql-kafka-0-10 connector could be fetched: " + "; ".join(errors))
