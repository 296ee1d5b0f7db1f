"""The cluster's topics as a driver step reads them (the Kafka sink's planner and commit):
through an admin client the driver process keeps between steps."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from kafka_eos_ds.kafka.driver_session import SESSIONS, ClientSessions
from kafka_eos_ds.kafka.errors import AuthWatch, mapping_client_errors
from kafka_eos_ds.kafka.settings import client_config


class MetadataClient:
    """An admin client that reads the cluster's topics, with its error watch. The driver
    process keeps it between steps, like its coordinator client (:mod:`~kafka_eos_ds.kafka.driver_session`):
    a new one paid a bootstrap connection in every planner and commit step (~15 ms each on
    loopback, a TLS or SASL handshake more on a secured cluster)."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        from confluent_kafka.admin import AdminClient

        self.watch = AuthWatch()
        self.conf = client_config(settings, "sink_metadata", error_cb=self.watch)
        self.admin = AdminClient(self.conf)

    def topics(self, timeout_s: float) -> Any:
        self.watch.error = None  # an error an earlier step saw explains nothing now
        with mapping_client_errors("read the cluster's topics", self.conf, watch=self.watch, client=self.admin):
            # All topics, not the one topic: a metadata request naming it could auto-create it.
            return self.admin.list_topics(timeout=timeout_s)

    def close(self) -> None:
        del self.admin  # librdkafka destroys the client with its last reference


def cluster_metadata(settings: Mapping[str, Any], timeout_s: float = 15.0, *, sessions: ClientSessions = SESSIONS,
                     client: Callable[[Mapping[str, Any]], Any] = MetadataClient) -> Any:
    """The cluster's topics and brokers (confluent-kafka ClusterMetadata), fresh, through
    the process's kept ``client`` (:class:`MetadataClient`, or a runtime's) built from the
    client ``settings`` (the same security settings as every other client of the sink)."""
    with sessions.session(settings, client) as kept:
        return kept.topics(timeout_s)
