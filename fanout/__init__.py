"""What Django and Spark share: event schema, ids, partitioning, the outbox
relay, Kafka plumbing and the Redis timeline store. Never imports Django."""
