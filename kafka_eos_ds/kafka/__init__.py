"""Kafka client plumbing shared by the source and the sink."""
