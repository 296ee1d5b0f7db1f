"""THIN ADAPTER for ``kafka_eos_ds.kafka_sink.commit_log.LogClients``: the clients of the real
``KafkaDecisionLog`` (admin, transactional producer, consumers) on the model's partition
logs, so the real commit-log algorithm (its topic set-up, its writer fencing, its wait for
the last stable offset, its backward windows) is what a schedule runs.

* :class:`ModelAdminClient`: ``list_topics`` and ``create_topics`` (confluent-kafka's shapes);
* :class:`~.producers.ConfluentProducer`: the decision writer;
* :class:`ModelConsumer`: ``get_watermark_offsets`` honours the consumer's
  ``isolation.level`` (read_committed: the last stable offset; read_uncommitted: the high
  watermark); ``assign`` + ``poll`` return the records from the assigned offset
  (read_committed: committed data below the LSO, aborted records and markers skipped)
  with their timestamps, then a ``_PARTITION_EOF`` event.

Also :class:`ModelMetadataClient`, the sink's metadata client (the runtime's ``metadata_client``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Mapping

from tests.simulation import world as sim
from tests.simulation.adapters.producers import ConfluentProducer
from tests.simulation.adapters.requests import PROCESS, request
from tests.simulation.faults import DROP


def _timed_out(text: str) -> Exception:
    from confluent_kafka import KafkaError, KafkaException

    return KafkaException(KafkaError(KafkaError._TIMED_OUT, text, retriable=True))


def metadata() -> Any:
    """What confluent-kafka's ``list_topics()`` returns, from the model (no step)."""
    cluster = sim.world().cluster
    topics = {t: SimpleNamespace(topic=t, error=None, partitions={p: SimpleNamespace(id=p, leader=1)
                                                                  for p in range(cluster.partitions(t))})
              for t in cluster.topics()}
    return SimpleNamespace(topics=topics, brokers={1: SimpleNamespace(id=1)})


def cluster_metadata(settings: Any, timeout_s: float = 15.0) -> Any:
    """``kafka_eos_ds.kafka.metadata.cluster_metadata`` on the model."""
    request("Metadata", "", lambda: None, coordinator=False, allow=PROCESS)
    return metadata()


class ModelMetadataClient:
    """``kafka_eos_ds.kafka.metadata.MetadataClient`` (the sink runtime's ``metadata_client``)
    on the model: each read of the cluster's topics is a request."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        pass

    def topics(self, timeout_s: float) -> Any:
        return cluster_metadata(None, timeout_s)

    def close(self) -> None:
        pass


class _Done:
    """A ``create_topics`` future."""

    def __init__(self, error: Exception | None) -> None:
        self._error = error

    def result(self, timeout: float | None = None) -> None:
        if self._error is not None:
            raise self._error


class ModelAdminClient:
    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.world = sim.world()

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        request("Metadata", topic or "", lambda: None, coordinator=False, allow=PROCESS)
        return metadata()

    def create_topics(self, new_topics: list[Any], **kwargs: Any) -> dict[str, Any]:
        from confluent_kafka import KafkaError, KafkaException

        cluster = self.world.cluster
        out = {}
        for topic in new_topics:
            def create(topic: Any = topic) -> Exception | None:
                if cluster.partitions(topic.topic):
                    return KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "exists"))
                cluster.create_topic(topic.topic, topic.num_partitions)
                return None

            out[topic.topic] = _Done(request("CreateTopics", topic.topic, create, coordinator=False,
                                             lost=_timed_out))
        return out

    def list_offsets(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the commit log does not list offsets")

    def poll(self, timeout: float = -1) -> int:
        return 0


class _Message:
    def __init__(self, topic: str, partition: int, offset: int, key: Any = None, value: Any = None,
                 timestamp: int = -1, error: Any = None) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._ts, self._error = _bytes(key), _bytes(value), timestamp, error

    def error(self) -> Any:
        return self._error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int | None:
        return None if self._error is not None else self._offset

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)  # TIMESTAMP_CREATE_TIME


def _bytes(data: Any) -> Any:
    return data.encode() if isinstance(data, str) else data


class ModelConsumer:
    """A confluent-kafka ``Consumer`` that only assigns (never subscribes), on the model."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.committed_only = str(conf.get("isolation.level", "read_committed")) == "read_committed"
        self.group = str(conf.get("group.id", ""))
        self._assigned: tuple[str, int, int] | None = None
        self._queue: list[_Message] | None = None

    @property
    def world(self) -> Any:
        """The current run's world: the driver process keeps its log readers from step to
        step (``decision_log._consumers``)."""
        return sim.world()

    def get_watermark_offsets(self, partition: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        log = self.world.cluster.log(partition.topic, partition.partition)
        what = "read_committed: LSO" if self.committed_only else "read_uncommitted: high watermark"

        def marks() -> tuple[int, int]:
            high = log.last_stable_offset() if self.committed_only else log.high_watermark()
            self.world.sched.log(f"  -> {high}")
            return 0, high

        return request("ListOffsets", f"{partition.topic}-{partition.partition} ({what})", marks, coordinator=False,
                       allow=PROCESS + (DROP,), lost=_timed_out)

    def assign(self, partitions: list[Any]) -> None:
        (tp,) = partitions
        self._assigned = (tp.topic, tp.partition, max(0, tp.offset))
        self._queue = None

    def poll(self, timeout: float = -1) -> _Message | None:
        from confluent_kafka import KafkaError

        assert self._assigned is not None, "poll before assign"
        topic, partition, start = self._assigned
        if self._queue is None:
            log = self.world.cluster.log(topic, partition)
            fault = self.world.sched.point("kafka:Fetch", f"{topic}-{partition} from {start}"
                                           + (" read_committed" if self.committed_only else ""), PROCESS + (DROP,))
            if fault is not None and fault.kind == DROP:
                return None  # the reader's poll timed out
            records = log.read_committed(start) if self.committed_only else log.read_uncommitted(start)
            end = log.last_stable_offset() if self.committed_only else log.high_watermark()
            self._queue = [_Message(topic, partition, r.offset, r.key, r.value, r.timestamp) for r in records]
            self._queue.append(_Message(topic, partition, end, error=KafkaError(KafkaError._PARTITION_EOF)))
        if not self._queue:
            return None
        return self._queue.pop(0)

    def unassign(self) -> None:
        self._assigned = self._queue = None

    def consumer_group_metadata(self) -> str:
        """The group, for the producer's send_offsets_to_transaction (no membership)."""
        return self.group

    def close(self) -> None:
        self._assigned = self._queue = None


class ModelLogClients:
    """``kafka_eos_ds.kafka_sink.commit_log.LogClients`` on the model."""

    def admin(self, conf: Mapping[str, Any]) -> ModelAdminClient:
        return ModelAdminClient(conf)

    def producer(self, conf: Mapping[str, Any]) -> ConfluentProducer:
        return ConfluentProducer(conf)

    def consumer(self, conf: Mapping[str, Any]) -> ModelConsumer:
        return ModelConsumer(conf)
