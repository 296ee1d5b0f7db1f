"""The exactly-once Kafka sink: task transaction -> commit message -> driver commit -> recovery.

In the order a write flows through them: :mod:`.config` (options and columns, checked
once), :mod:`.sink` (the sink's steps, composed into the protocol's writers of
:mod:`kafka_eos_ds.twophase.writers`), :mod:`.task_writer` (a task's transaction),
:mod:`.messages` (what a task reports), and the two ports of :mod:`kafka_eos_ds.twophase`:
:mod:`.participants` (transactions by id, with :mod:`.commit_outcome` sorting EndTxn
answers) and :mod:`.decision_log` (decisions in the commit-log topic, which
:mod:`.commit_log` creates and reads). :mod:`.transactional_ids` names
the transactions; :mod:`kafka_eos_ds.storage.checkpoint` reads what a batch consumed;
:mod:`.transactions_tool` lists and aborts a sink's open transactions for operators.
"""

from kafka_eos_ds.kafka_sink.sink import batch_writer, stream_writer
from kafka_eos_ds.kafka_sink.transactions_tool import abort_transactions, finish_decided, list_transactions

__all__ = ["batch_writer", "stream_writer", "list_transactions", "finish_decided", "abort_transactions"]
