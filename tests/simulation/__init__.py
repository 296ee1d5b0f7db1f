"""A seeded, randomized simulation of the exactly-once sink's protocol.

It drives the product's real code (``kafka_eos_ds.twophase``, the Kafka sink with its
commit log and coordinator client, the file sink on a real temporary directory) through
Spark's call shapes, against in-memory models of Kafka's transaction coordinator and
partition logs, with crashes and other faults at every step, and checks the sink's
guarantee after every schedule. It complements the real-broker tests (``integration/``);
it does not replace them. The ``full`` marker runs many more schedules than the gate.

Layers, each usable without the next:

* :mod:`.model` — Kafka models (no kafka_eos_ds import);
* :mod:`.scheduler` — deterministic cooperative actors on a virtual clock, with faults;
* :mod:`.adapters` and :mod:`.seams` — the models plugged into the product's seams as
  they are today (the only modules to change when those seams change);
* :mod:`.spark_model`, :mod:`.spark_shapes`, :mod:`.spark_jobs` — Spark's call shapes
  (micro-batches, tasks, retries, speculation, stage retries, zombies, driver crashes,
  batch jobs, foreachBatch, local properties);
* :mod:`.shapes`, :mod:`.write_shapes` — the randomized scenarios, built on
  :mod:`.scenario`; :mod:`.directed` — the directed ones;
* :mod:`.invariants` — what must hold; :mod:`.explorer` — seeds, shrinking, the report.

Run ``python -m tests.simulation --schedules 500 --seed 1`` (``--help`` for more).
"""
