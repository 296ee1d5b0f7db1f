"""The exactly-once Kafka sink: task transaction -> commit message -> driver commit -> recovery.

``format("kafka_eos")`` writes go through :class:`KafkaStreamWriter` (streaming) and
:class:`KafkaBatchWriter` (batch); :mod:`.transactions_tool` lists and aborts a sink's
open transactions for operators.
"""

from kafka_eos_ds.sink.transactions_tool import abort_transactions, list_transactions
from kafka_eos_ds.sink.writers import KafkaBatchWriter, KafkaStreamWriter

__all__ = ["KafkaBatchWriter", "KafkaStreamWriter", "list_transactions", "abort_transactions"]
