"""The main job: an exactly-once Kafka -> Spark -> Kafka pipeline, crashed on purpose.

``job`` is the Spark query (run as its own process so it can be killed like a real
driver); ``processes`` starts and kills such processes with all their children;
``chaos`` seeds the input, crashes and restarts the job, drains it and audits the output.
The table variant (``demo --table``): ``table_stores`` starts Kafka, HDFS and a Hive
metastore, ``table_chaos`` runs the job into a partitioned table with the same kills, and
``table_audit`` reads the table through the metastore and over its path.
"""
