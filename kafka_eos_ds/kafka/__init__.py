"""Kafka client adapters shared by the source and the sink: the one boundary every client
is built through (:mod:`.client_settings`, with the Java client's settings translated in
:mod:`.java_settings`) and the transaction-coordinator calls librdkafka lacks
(:mod:`.coordinator`, on kafka-python)."""
