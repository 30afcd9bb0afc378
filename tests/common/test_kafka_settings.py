"""Kafka security and identity settings reach every client the same way."""

from __future__ import annotations

from fanout.config import KAFKA_CLIENT_ENV, StarlingConfig
from fanout.kafka import admin_settings, producer_settings
from spark.source.datasource import SourceOptions, source_options
from spark.source.kafka_io import connection, consumer_settings

ENV = {
    "KAFKA_BOOTSTRAP_SERVERS": "kafka-1:9093,kafka-2:9093",
    "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "KAFKA_SASL_USERNAME": "starling",
    "KAFKA_SASL_PASSWORD": "s3cret",
    "KAFKA_SSL_CA_LOCATION": "/etc/starling/ca.pem",
    "KAFKA_CLIENT_ID": "starling-prod",
}
WANTED = {
    "bootstrap.servers": "kafka-1:9093,kafka-2:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "starling",
    "sasl.password": "s3cret",
    "ssl.ca.location": "/etc/starling/ca.pem",
    "client.id": "starling-prod",
}


def test_the_environment_names_librdkafka_settings() -> None:
    client = StarlingConfig.from_env(ENV).kafka_client()
    assert client[0] == ("bootstrap.servers", "kafka-1:9093,kafka-2:9093")
    assert dict(client) == WANTED
    assert StarlingConfig.from_env({}).kafka_client() == (("bootstrap.servers", "127.0.0.1:9092"),)
    assert set(KAFKA_CLIENT_ENV.values()) >= set(WANTED) - {"bootstrap.servers"}
    assert "s3cret" not in repr(StarlingConfig.from_env(ENV))  # logs show configurations


def test_producer_admin_and_consumers_all_get_them() -> None:
    client = StarlingConfig.from_env(ENV).kafka_client()
    for settings in (admin_settings(client), producer_settings(client), consumer_settings(client)):
        assert {k: settings[k] for k in WANTED} == WANTED
    # A producer's own tuning cannot drop them.
    assert producer_settings(client, **{"linger.ms": 5})["sasl.password"] == "s3cret"


def test_the_spark_source_carries_them_to_its_executors() -> None:
    client = StarlingConfig.from_env(ENV).kafka_client()
    options = source_options(client) | {"topics": "tweets,follows"}
    assert options["kafka.security.protocol"] == "SASL_SSL"  # as Spark's Kafka source names them
    parsed = SourceOptions.parse(options)
    assert dict(parsed.client) == WANTED
    assert dict(consumer_settings(parsed.client))["sasl.username"] == "starling"
    assert connection("broker:9092") == (("bootstrap.servers", "broker:9092"),)
