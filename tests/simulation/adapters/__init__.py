"""THIN ADAPTERS: the Kafka models behind the product's client seams, as those are today.

Each class stands in for one class of the product that talks to Kafka, with the same
constructor and methods, and answers from the models in :mod:`tests.simulation.model`:

* :class:`~.coordinator.ModelTransactionCoordinator` for ``kafka_eos_ds.kafka.coordinator.
  TransactionCoordinator`` (kafka-python requests for another process's transactions): the
  real ``KafkaTransactions`` and ``commit_outcome`` run on it;
* :class:`~.producers.ModelPartitionWriter` for ``kafka_eos_ds.sink.task_writer.
  _PartitionWriter`` (one task's librdkafka producer, a ``twophase.protocol.TaskTransaction``): the real
  ``write_partition`` and ``twophase.task.run_task`` run on it;
* :class:`~.decision_log.ModelDecisionLog` for ``kafka_eos_ds.sink.decision_log.
  KafkaDecisionLog``: it reads as the real one does, ``read_committed`` up to the last stable offset, so another
  writer's open transaction on the commit log hides everything after it. When the real
  decision log gets a client seam, plug the model in there and delete that module.

Every request first makes a step of the scheduler (where faults strike: the process
dies before the request, the request is lost, its answer is lost after it took effect,
the coordinator is moving: :mod:`.requests`). :mod:`tests.simulation.seams` installs
these classes.
"""

from tests.simulation.adapters.coordinator import ModelTransactionCoordinator
from tests.simulation.adapters.decision_log import ModelDecisionLog, cluster_metadata
from tests.simulation.adapters.producers import ModelPartitionWriter, Producer

__all__ = ["ModelDecisionLog", "ModelPartitionWriter", "ModelTransactionCoordinator", "Producer", "cluster_metadata"]
