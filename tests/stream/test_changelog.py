"""Writes become the right changelog records, in order, on the right partitions."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from fanout.config import StarlingConfig
from fanout.kafka import ensure_topics, make_producer
from fanout.model import events
from fanout.model.partitioning import partition_for
from feed.auth import issue_token
from feed.devstack import embedded, kafka
from feed.models import OutboxEvent, User
from feed.outbox import DjangoOutboxStore
from feed.relay import OutboxRelay
from feed.tasks import run_relay
from tests.conftest import make_config
from tests.support.factories import UserFactory
from tests.support.kafka_helpers import Read, read_topic

pytestmark = pytest.mark.django_db


def api(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(user)}")
    return client


def decoded(config: StarlingConfig, reads: list[Read]) -> list[tuple[int, events.Event]]:
    out = []
    for r in reads:
        envelope = events.decode(config.topics.logical(r.topic), r.key, r.value, r.headers)
        assert r.partition == partition_for(envelope.event.join_key, config.partitions)
        out.append((envelope.seq, envelope.event))
    return out


def scripted_writes() -> tuple[dict[str, User], list[events.Event], list[int]]:
    """A short story through the API; returns users, the events it must produce, and seqs."""
    users = {n: UserFactory(username=n) for n in ("ann", "bob", "cat")}
    ann, bob, cat = users["ann"], users["bob"], users["cat"]
    seqs: list[int] = []
    expected: list[events.Event] = []

    def tweet(user: User, text: str) -> int:
        body = api(user).post("/api/v1/tweets", {"text": text}, format="json").json()
        seqs.append(body["seq"])
        expected.append(events.TweetPosted(body["id"], user.pk, user.username, text))
        return body["id"]

    def follow(a: User, b: User) -> None:
        seqs.append(api(a).post(f"/api/v1/users/{b.username}/follow").json()["seq"])
        expected.append(events.Followed(a.pk, b.pk))

    def unfollow(a: User, b: User) -> None:
        seqs.append(api(a).delete(f"/api/v1/users/{b.username}/follow").json()["seq"])
        expected.append(events.Unfollowed(a.pk, b.pk))

    def delete(user: User, tweet_id: int) -> None:
        response = api(user).delete(f"/api/v1/tweets/{tweet_id}")
        assert response.status_code == 204
        seqs.append(int(response["X-Starling-Seq"]))
        expected.append(events.TweetDeleted(tweet_id, user.pk))

    follow(bob, ann)
    t1 = tweet(ann, "hello")
    follow(cat, ann)
    tweet(bob, "hi ann")
    delete(ann, t1)
    unfollow(bob, ann)
    follow(bob, ann)
    tweet(cat, "third")
    follow(ann, cat)
    unfollow(cat, ann)
    return users, expected, seqs


def test_scripted_writes_produce_exactly_the_expected_events(starling: StarlingConfig) -> None:
    _, expected, seqs = scripted_writes()
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    result = run_relay()
    assert result.ok and result.published == len(expected)
    assert not OutboxEvent.objects.filter(published_at__isnull=True).exists()

    reads = read_topic(starling.kafka_bootstrap_servers, starling.topics.tweets, 4, expect=4)
    reads += read_topic(starling.kafka_bootstrap_servers, starling.topics.follows, 4, expect=6)
    got = decoded(starling, reads)
    # Exactly the expected events, each once, and every seq as the API returned it.
    assert sorted(got, key=lambda e: e[0]) == list(zip(seqs, expected, strict=True))
    # Order per key (per partition, by offset) is commit order.
    by_key: dict[tuple[str, bytes], list[int]] = {}
    for r, (seq, _) in sorted(
        zip(reads, got, strict=True), key=lambda x: (x[0].topic, x[0].partition, x[0].offset)
    ):
        by_key.setdefault((r.topic, r.key), []).append(seq)
    assert all(s == sorted(s) for s in by_key.values())
    # Tombstones for the delete and the unfollows.
    assert sum(r.value is None for r in reads) == 3

    # A second relay run publishes nothing more.
    assert run_relay().published == 0


def test_topics_have_the_configured_partitions_and_retention(starling: StarlingConfig) -> None:
    from confluent_kafka.admin import ConfigResource

    from fanout.kafka import admin_client, topic_partitions

    assert sorted(ensure_topics(starling)) == sorted(starling.topics.all())
    assert ensure_topics(starling) == []  # idempotent
    admin = admin_client(starling)
    parts = topic_partitions(admin, timeout=5)
    assert {t: parts[t] for t in starling.topics.all()} == {t: 4 for t in starling.topics.all()}
    tombstones = str(starling.tombstone_retention_hours * 3600 * 1000)
    for topic in starling.topics.all():
        configs = admin.describe_configs([ConfigResource("topic", topic)])
        (future,) = configs.values()
        found = {k: v.value for k, v in future.result().items()}
        if topic == starling.topics.timelines:  # commands expire, before tombstones do
            assert found["cleanup.policy"] == "delete"
            assert int(found["retention.ms"]) < int(tombstones)
        else:  # the tables: compacted, tombstones kept as configured
            assert found["cleanup.policy"] == "compact"
            assert found["delete.retention.ms"] == tombstones


def test_partition_count_mismatch_is_refused(starling: StarlingConfig) -> None:
    from dataclasses import replace

    from fanout.kafka import TopicMismatch

    ensure_topics(starling)
    with pytest.raises(TopicMismatch, match="STARLING_PARTITIONS"):
        ensure_topics(replace(starling, partitions=8))


def test_broker_unreachable_writes_succeed_and_publish_once_after_it_returns(
    settings, redis_url: str, service_logs
) -> None:
    port = embedded.free_port()
    config = make_config(f"127.0.0.1:{port}", redis_url)
    settings.STARLING = config
    _, expected, _ = scripted_writes()  # the API answers while no broker exists
    assert OutboxEvent.objects.filter(published_at__isnull=True).count() == len(expected)

    producer = make_producer(config, **{"message.timeout.ms": 1500})
    relay = OutboxRelay(
        store=DjangoOutboxStore(), producer=producer, config=config, delivery_timeout=10
    )
    failed = relay.run()
    assert not failed.ok and failed.published == 0
    assert OutboxEvent.objects.filter(published_at__isnull=True).count() == len(expected)

    broker = kafka.start_node(service_logs / "late-broker", port=port)
    try:
        ensure_topics(config)
        assert relay.run().published == len(expected)
        reads = read_topic(config.kafka_bootstrap_servers, config.topics.tweets, 4, expect=4)
        reads += read_topic(config.kafka_bootstrap_servers, config.topics.follows, 4, expect=6)
        seqs = [
            events.decode(config.topics.logical(r.topic), r.key, r.value, r.headers).seq
            for r in reads
        ]
        assert sorted(seqs) == sorted(OutboxEvent.objects.values_list("id", flat=True))
        assert len(seqs) == len(set(seqs))  # once each
    finally:
        del relay, producer  # close the client while its broker is still up
        broker.stop()
