"""What Django and Spark share: the pure model (``fanout.model``), the Redis
timeline store (``fanout.store``), and the settings, Kafka clients and process
helpers every process uses. Never imports Django."""
