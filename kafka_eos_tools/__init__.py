"""Tooling around kafka_eos, not part of the product: the crash tests' fault injection
(:mod:`.faults`). The product (:mod:`kafka_eos_ds`) never imports this package."""
