"""The streaming fanout job: changelogs in, the join as a stateful operator,
bundles out, written to Redis by the sink; its supervisor and progress."""
