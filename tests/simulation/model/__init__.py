"""In-memory models of what the sink talks to in Kafka, independent of kafka_eos_ds.

:mod:`.clock` (virtual time), :mod:`.logs` (partition logs, read_committed, group
offsets), :mod:`.coordinator` (the transaction coordinator's rules), :mod:`.cluster`
(the three together, with the brokers' background work). Each rule is commented with
the Kafka class it comes from; ``test_models.py`` checks the answers directly.
"""
