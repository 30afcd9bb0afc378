"""The Kafka data source (a PySpark Python data source over the changelogs)."""
