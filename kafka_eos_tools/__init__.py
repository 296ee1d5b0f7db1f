"""Tooling around kafka_eos, not part of the product: the embedded Kafka (:mod:`.broker`),
the crash demo (:mod:`.demo`), the exactly-once audit (:mod:`.audit`) and the crash
tests' fault injection (:mod:`.faults`). The product (:mod:`kafka_eos_ds`) never imports
this package."""
