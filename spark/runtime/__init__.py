"""What every Spark job runs on: the tuned session, the JVM class archive,
the Python worker daemon and heap, Arrow helpers."""
