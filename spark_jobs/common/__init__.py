"""What the two jobs share, below both: `session` builds the SparkSession (the Kafka connector jars, the check's
digest reader, the project zip shipped to the executors), `job_config` turns a spec's mirror or flags into the
job's target, `kafka_meta` answers the driver's Kafka questions (partitions, watermarks, committed offsets), and
`stable_offsets` holds the last-stable-offset rules. None of them imports the catch-up or the check."""
