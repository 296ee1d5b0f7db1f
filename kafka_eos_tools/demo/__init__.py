"""The main job: an exactly-once Kafka -> Spark -> Kafka pipeline, crashed on purpose.

``job`` is the Spark query (run as its own process so it can be killed like a real
driver); ``processes`` starts and kills such processes with all their children;
``chaos`` seeds the input, crashes and restarts the job, drains it and audits the output.
"""
