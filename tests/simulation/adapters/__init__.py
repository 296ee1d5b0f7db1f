"""THIN ADAPTERS: the Kafka models behind the product's client seams, as those are today.

Each stands in for one client the product talks to Kafka with, and answers from the
models in :mod:`tests.simulation.model`:

* :mod:`.coordinator`: kafka-python's admin client and the coordinator channel, handed to
  the real ``kafka_eos_ds.kafka.coordinator.TransactionCoordinator`` through its
  ``admin_factory`` and ``channel_factory``: the real coordinator calls,
  ``KafkaTransactions`` and ``commit_outcome`` run on them;
* :mod:`.log_clients`: the admin, transactional producer and consumers of the real
  ``kafka_eos_ds.kafka_sink.decision_log.KafkaDecisionLog``, through its ``LogClients`` seam,
  and the sink's metadata client;
* :class:`~.producers.ModelPartitionWriter` for ``kafka_eos_ds.kafka_sink.task_writer.
  _PartitionWriter`` (one task's librdkafka producer): the real ``write_partition`` and
  ``twophase.task.run_task`` run on it.

Every request first makes a step of the scheduler (where faults strike: the process
dies before the request, the request is lost, its answer is lost after it took effect,
the coordinator is moving: :mod:`.requests`). :mod:`tests.simulation.seams` hands
them to the sinks in their runtimes.
"""

from tests.simulation.adapters.coordinator import ModelAdmin, ModelChannel, transaction_coordinator
from tests.simulation.adapters.log_clients import ModelLogClients, ModelMetadataClient, cluster_metadata
from tests.simulation.adapters.producers import ModelPartitionWriter, Producer

__all__ = ["ModelAdmin", "ModelChannel", "ModelLogClients", "ModelMetadataClient", "ModelPartitionWriter", "Producer",
           "cluster_metadata", "transaction_coordinator"]
