"""The Spark jobs: the streaming fanout join, its Kafka data source, the rebuild."""
