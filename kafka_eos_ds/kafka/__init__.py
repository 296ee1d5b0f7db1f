"""Kafka client adapters shared by the source and the sink: client settings
(:mod:`.config`) and the transaction-coordinator calls librdkafka lacks
(:mod:`.coordinator`, on kafka-python)."""
