"""Auto-registration shim: Spark registers top-level ``pyspark_*`` modules that define
``DefaultSource``, so ``format("kafka_eos")`` works after ``pip install`` with no call.

It also works as a single file in ``spark-submit --py-files`` next to the package
(Spark's discovery does not look inside ``.zip`` files; see docs/usage.md).
"""

from kafka_eos_ds.datasource import KafkaEosDataSource as DefaultSource

__all__ = ["DefaultSource"]
