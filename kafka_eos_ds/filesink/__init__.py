"""The exactly-once file sink (``format("kafka_eos_file")``): in-progress -> pending ->
final files, on the sink-agnostic protocol of :mod:`kafka_eos_ds.twophase`.

:mod:`.layout` names the files, :mod:`.config` reads the options, :mod:`.task` writes
a task's file, :mod:`.store` holds the decision log and the participants port,
:mod:`.writers` are Spark's writers, :mod:`.datasource` the data source.
"""

FORMAT = "kafka_eos_file"

__all__ = ["FORMAT"]
