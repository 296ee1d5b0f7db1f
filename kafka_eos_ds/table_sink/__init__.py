"""The exactly-once table sink (``format("kafka_eos_file")``): in-progress -> pending ->
final files, on the sink-agnostic protocol of :mod:`kafka_eos_ds.twophase`.

In the order a write flows through them: :mod:`.datasource` (the data source),
:mod:`.config` (options), :mod:`.sink` (the sink's steps, composed into the
protocol's writers), :mod:`.task` (a task's file), :mod:`.staging` (how the store holds
it until the commit: by rename, or as an S3 upload), :mod:`.layout` (file names), and the
two ports: :mod:`.participants` (pending files; S3: :mod:`.uploads`) and
:mod:`.decision_log` (numbered decision files per writer).
"""

FORMAT = "kafka_eos_file"

__all__ = ["FORMAT"]
