"""Kafka client adapters shared by the source and the sink, one module per thing that
flows through them: client settings (:mod:`.settings`, with the Java client's settings
translated in :mod:`.java_settings` and PKCS#12 stores converted in :mod:`.tls`), client
errors (:mod:`.errors`, the one place they become the project's), the kafka-python client
(:mod:`.kafka_python`), the transaction-coordinator calls librdkafka lacks
(:mod:`.coordinator`), the coordinator clients a driver process keeps between its steps
(:mod:`.driver_session`), the cluster's topics as a driver step reads them (:mod:`.metadata`),
a transactional producer's start (:mod:`.producer_start`) and
the client calls the project makes, as Protocols (:mod:`.clients`)."""
