"""The benchmark harness: kafka_eos side by side with Spark's built-in Kafka connector
and the raw confluent-kafka ceiling. Run ``python -m bench.run --help``."""
