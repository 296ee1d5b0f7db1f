"""A seeded, randomized simulation of the exactly-once sink's protocol.

It drives the product's real protocol code (``kafka_eos_ds.twophase``, the Kafka sink's
participants, commit outcomes and transactional ids, the Spark writers, and the file sink
on a real temporary directory) through Spark's call shapes, against in-memory models of
Kafka's transaction coordinator and partition logs, with crashes and other faults at
every step, and checks the sink's guarantee after every schedule. It complements the
real-broker tests (``integration/``); it does not replace them.

Layers, each usable without the next:

* :mod:`.model` — Kafka models (no kafka_eos_ds import);
* :mod:`.scheduler` — deterministic cooperative actors on a virtual clock, with faults;
* :mod:`.adapters` and :mod:`.seams` — the models plugged into the product's seams as
  they are today (the only modules to change when those seams change);
* :mod:`.spark_shapes` — Spark's call shapes (micro-batches, tasks, retries,
  speculation, stage retries, zombies, driver crashes, batch jobs, foreachBatch);
* :mod:`.invariants` — what must hold; :mod:`.explorer` — seeds, shrinking, the report.

Run ``python -m tests.simulation --schedules 500 --seed 1`` (``--help`` for more).
"""
