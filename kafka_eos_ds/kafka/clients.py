"""The client calls the project makes, as Protocols.

confluent-kafka's clients are C extension types and kafka-python's admin client is
untyped; these Protocols name the few calls the project relies on, so a signature says
which client it takes, and a unit test hands a fake in through a constructor parameter
(a factory) instead of patching a module or a private attribute. The real clients are
built in one place each and satisfy them as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Mapping, Protocol, Sequence

if TYPE_CHECKING:
    from concurrent.futures import Future

    from confluent_kafka import Consumer, Message, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient


class ProducerLike(Protocol):
    """The calls made on a ``confluent_kafka.Producer``."""

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1, *,
                headers: Any = None) -> None: ...

    def poll(self, timeout: float = -1) -> int: ...

    def flush(self, timeout: float = -1) -> int: ...

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...

    def init_transactions(self, timeout: float = -1) -> None: ...

    def begin_transaction(self) -> None: ...

    def commit_transaction(self, timeout: float = -1) -> None: ...

    def abort_transaction(self, timeout: float = -1) -> None: ...

    def send_offsets_to_transaction(self, positions: list[TopicPartition], group_metadata: Any,
                                    timeout: float = -1) -> None: ...


class ConsumerLike(Protocol):
    """The calls made on a ``confluent_kafka.Consumer`` (the project never subscribes:
    it assigns partitions, or only asks and commits)."""

    def assign(self, partitions: list[TopicPartition]) -> None: ...

    def unassign(self) -> None: ...

    def pause(self, partitions: list[TopicPartition]) -> None: ...

    # Messages as Any: the range reader keeps error events apart itself (their offset() is None).
    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]: ...

    def poll(self, timeout: float = -1) -> Message | None: ...

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]: ...

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]: ...

    def commit(self, *, offsets: list[TopicPartition], asynchronous: Literal[False]) -> list[TopicPartition]: ...

    def consumer_group_metadata(self) -> Any: ...

    def close(self) -> None: ...


class AdminLike(Protocol):
    """The calls made on a ``confluent_kafka.admin.AdminClient``."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...

    def list_offsets(self, topic_partition_offsets: dict[TopicPartition, Any],
                     **kwargs: Any) -> dict[TopicPartition, Future[Any]]: ...

    def create_topics(self, new_topics: list[Any], **kwargs: Any) -> dict[str, Future[Any]]: ...

    def poll(self, timeout: float = -1) -> int: ...


class CoordinatorAdminLike(Protocol):
    """The public calls made on a kafka-python ``KafkaAdminClient`` (the transaction
    coordinator's client)."""

    def describe_transactions(self, transactional_ids: Sequence[str]) -> Mapping[str, Any]: ...

    def list_transactions(self, state_filters: Any = None,
                          transactional_id_pattern: str | None = None) -> Mapping[Any, Any]: ...

    def alter_group_offsets(self, group_id: str, offsets: Mapping[Any, Any]) -> Mapping[Any, Any]: ...

    def close(self) -> None: ...


class ChannelLike(Protocol):
    """Requests to the coordinator of a transactional id or a group
    (:class:`~kafka_eos_ds.kafka.kafka_python.CoordinatorChannel`)."""

    def send(self, key: str, request: Any, *, group: bool) -> Any: ...

    def forget(self, key: str, *, group: bool) -> None: ...

    def refresh(self) -> None: ...

    def api_version(self, request_class: Any) -> int: ...


if TYPE_CHECKING:
    def _the_real_clients_fit(producer: Producer, consumer: Consumer,
                              admin: AdminClient) -> tuple[ProducerLike, ConsumerLike, AdminLike]:
        """Never called: mypy checks here that confluent-kafka's clients satisfy the Protocols
        (kafka-python has no type information to check against)."""
        return producer, consumer, admin
