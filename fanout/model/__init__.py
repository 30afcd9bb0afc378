"""The pure model: events and their wire format, ids, partitioning, the join's
rules, an author's state, the watermark. No I/O: no Redis, Kafka, Spark or Django."""
