"""Commit order against seq order, on PostgreSQL: a transaction can take seq 10
and commit after the one that took 11. The relay never publishes 11 before 10
is settled (committed or rolled back), so the marks it writes are true: every
seq up to a mark is on the log before it."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from fanout.config import StarlingConfig
from fanout.kafka import make_producer
from feed import outbox
from feed.outbox import DjangoOutboxStore
from feed.relay import MarkState, OutboxRelay
from feed.services import tweet_create
from tests.support import postgres
from tests.support.factories import UserFactory
from tests.support.kafka_helpers import read_topic

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(postgres.database_kind() != "postgres", reason="needs PostgreSQL"),
]


def in_flight_tweet_event(author_id: int) -> tuple[psycopg.Connection, int]:
    """An outbox row written by a transaction that has not committed yet."""
    settings = connection.settings_dict
    conn = psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"],
        user=settings["USER"],
        dbname=settings["NAME"],
    )
    conn.execute("SELECT pg_current_xact_id()")
    row = conn.execute(
        "INSERT INTO feed_outboxevent (topic, key, value, join_key, created_at) "
        "VALUES ('tweets', '1', NULL, %s, now()) RETURNING id",
        [author_id],
    ).fetchone()
    assert row is not None
    return conn, int(row[0])


def test_a_later_seq_waits_until_the_earlier_one_is_settled(
    starling: StarlingConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox, "SETTLE_TIMEOUT", 0.3)
    ann = UserFactory(username="ann")
    slow, early = in_flight_tweet_event(ann.pk)  # takes its seq first...
    late = tweet_create(author=ann, text="committed first").seq  # ...commits last
    assert early < late
    relay = OutboxRelay(
        store=DjangoOutboxStore(),
        producer=make_producer(starling),
        config=starling,
        marks=MarkState(),
    )
    from fanout.kafka import ensure_topics

    ensure_topics(starling)
    assert outbox.settled_high() is None  # the early transaction is still in flight
    assert relay.run().published == 0  # so nothing is published, not even `late`
    slow.commit()
    slow.close()
    assert outbox.settled_high() == late
    result = relay.run()
    assert result.ok and result.published == 2
    reads = read_topic(starling.kafka_bootstrap_servers, starling.topics.tweets, 4, expect=2)
    assert sorted(int(r.headers["seq"]) for r in reads) == [early, late]
    marks = read_topic(
        starling.kafka_bootstrap_servers, starling.topics.tweets, 4, expect=6, marks=True
    )
    assert {int(r.headers["mark"]) for r in marks if "mark" in r.headers} == {late}


def test_a_rolled_back_seq_is_a_gap_the_relay_does_not_wait_for(
    starling: StarlingConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox, "SETTLE_TIMEOUT", 0.3)
    ann = UserFactory(username="ann")
    slow, early = in_flight_tweet_event(ann.pk)
    late = tweet_create(author=ann, text="after a rollback").seq
    slow.rollback()
    slow.close()
    assert outbox.settled_high() == late
    assert [e.seq for e in DjangoOutboxStore().pending(10)][-1] == late
    assert early not in [e.seq for e in DjangoOutboxStore().pending(10)]
