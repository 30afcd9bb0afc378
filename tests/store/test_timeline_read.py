"""GET /api/v1/timeline against real Redis and the database.

Timelines are written the way the fanout job writes them (the join core and
the timeline store); the job itself is exercised in test_fanout_job.py and
the end-to-end suite.
"""

from __future__ import annotations

import io
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis
from django.core import signals
from django.db import close_old_connections

from fanout.config import StarlingConfig
from fanout.model import events
from fanout.model.author_state import AuthorState
from fanout.model.join import Mutation, Op, join_events
from fanout.store.timelines import TimelineStore, store_for
from feed.auth import issue_token
from feed.models import OutboxEvent, User
from feed.relations import follow_create
from feed.services import tweet_create, tweet_delete
from tests.support.clients import StarlingClient, client_for
from tests.support.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

#: A tweet's counts when no one liked or reposted it.
ZERO = {"likes": 0, "reposts": 0, "replies": 0}


class Fanout:
    """Applies changelog events to Redis the way the job does (no Spark)."""

    def __init__(self, config: StarlingConfig) -> None:
        self.store_config = config
        self.store = store_for(config)
        self.generation = self.store.ensure_active_generation()
        self.cap = config.timeline_size
        self.states: dict[int, AuthorState] = {}
        self.seq = itertools.count(1)

    def apply(self, *evs: events.Event, seq: int | None = None) -> None:
        by_key: dict[int, list[events.Envelope]] = {}
        for ev in evs:
            by_key.setdefault(ev.join_key, []).append(events.Envelope(seq or next(self.seq), ev))
        bodies: dict[int, bytes] = {}
        mutations: list[Mutation] = []
        for author, envs in by_key.items():
            result = join_events(author, self.states.get(author, AuthorState()), envs, cap=self.cap)
            self.states[author] = result.state
            bodies |= result.bodies
            mutations += result.mutations
        self.store.apply(self.generation, bodies, mutations)
        self.store.release_resets(self.generation, seq or 0)
        self.store.record_watermark(
            self.generation,
            batch_id=next(self.seq),
            seq=seq or 0,
            marks={},
            contiguous=seq or 0,
            event_time=0,
            offsets={},
            counters={},
        )


@pytest.fixture
def fanout(starling: StarlingConfig) -> Fanout:
    return Fanout(starling)


def posted(user: User, text: str) -> events.TweetPosted:
    tweet = tweet_create(author=user, text=text).tweet
    return events.TweetPosted(tweet.id, user.pk, user.username, tweet.text)


def client_commands(r: redis.Redis, action: Callable[[], Any]) -> list[str]:
    """The commands clients sent to Redis while ``action`` ran (MONITOR; the
    commands a script runs inside Redis are left out)."""
    seen: list[tuple[str, str]] = []
    marker: list[str] = []
    ready = threading.Event()

    def watch() -> None:
        with r.monitor() as monitor:
            ready.set()
            for cmd in monitor.listen():
                if cmd.get("client_type") == "lua":
                    continue
                who = f"{cmd.get('client_address')}:{cmd.get('client_port')}"
                if cmd["command"] == "ECHO end-of-action":
                    marker.append(who)
                    return
                seen.append((who, cmd["command"].split(" ")[0]))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ready.wait(5)
    time.sleep(0.1)
    action()
    r.echo("end-of-action")
    watcher.join(5)
    return [
        command for who, command in seen if who not in marker
    ]  # not the marker's own connection


def test_a_warm_read_is_one_redis_command_and_no_sql(
    fanout: Fanout, redis_client: redis.Redis, django_assert_num_queries: Callable[..., Any]
) -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    follow_create(follower=bob, followee=ann)
    t1, t2 = posted(ann, "one"), posted(ann, "two")
    fanout.apply(events.Followed(bob.pk, bob.pk), events.Followed(bob.pk, ann.pk), t1, t2, seq=7)
    client = client_for(bob)
    client.get("/api/v1/timeline")  # loads the script into Redis once
    responses = []
    with django_assert_num_queries(0):
        sent = client_commands(
            redis_client, lambda: responses.append(client.get("/api/v1/timeline?count=10"))
        )
    assert sent == ["EVALSHA"]
    (response,) = responses
    assert response.status_code == 200
    assert response.json() == {
        "tweets": [
            {**events.tweet_fields(t.tweet_id, "ann", t.text), "repost_of": None, "counts": ZERO}
            for t in (t2, t1)
        ],
        "next_max_id": None,
    }
    assert response["X-Starling-Source"] == "redis"
    assert response["X-Starling-Watermark"] == "7"
    assert float(response["X-Starling-Watermark-Age"]) < 60


def test_cursor_paging_returns_every_entry_once_in_order(
    settings, starling: StarlingConfig
) -> None:
    from dataclasses import replace

    settings.STARLING = replace(starling, timeline_size=120)
    fanout = Fanout(settings.STARLING)
    ann = UserFactory(username="ann")
    tweets = [posted(ann, f"t{i}") for i in range(150)]
    fanout.apply(events.Followed(ann.pk, ann.pk), *tweets)
    client = client_for(ann)
    seen: list[int] = []
    sources: list[str] = []
    url = "/api/v1/timeline?count=50"
    while url:
        response = client.get(url)
        page = response.json()
        seen += [t["id"] for t in page["tweets"]]
        sources.append(response["X-Starling-Source"])
        url = page["next_max_id"] and f"/api/v1/timeline?count=50&max_id={page['next_max_id']}"
    everything = sorted((t.tweet_id for t in tweets), reverse=True)
    # Past the 120 Redis keeps, paging goes on from the database: no gap, no repeat.
    assert seen == everything
    assert sources == ["redis", "redis", "redis+database"]
    older = client.get(f"/api/v1/timeline?count=10&max_id={everything[130]}")
    assert older["X-Starling-Source"] == "database"
    assert [t["id"] for t in older.json()["tweets"]] == everything[130:140]
    since = client.get(f"/api/v1/timeline?since_id={everything[3]}").json()
    assert [t["id"] for t in since["tweets"]] == everything[:3]


def test_deleted_tweets_never_appear(fanout: Fanout) -> None:
    ann = UserFactory(username="ann")
    keep, gone = posted(ann, "keep"), posted(ann, "gone")
    fanout.apply(events.Followed(ann.pk, ann.pk), keep, gone)
    fanout.store.apply(fanout.generation, {}, [Mutation(Op.DELETE_BODY, (), (gone.tweet_id,))])
    page = client_for(ann).get("/api/v1/timeline").json()
    assert [t["id"] for t in page["tweets"]] == [keep.tweet_id]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("count=0", "count"),
        ("count=500", "count"),
        ("max_id=x", "max_id"),
        ("since_id=-3", "since_id"),
        ("min_seq=abc", "min_seq"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(
    fanout: Fanout, query: str, param: str
) -> None:
    response = client_for(UserFactory()).get(f"/api/v1/timeline?{query}")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and param in error["message"] and param in error["fields"]


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "not_authenticated"),
        ("Bearer nope", "authentication_failed"),
        ("Basic abc", "not_authenticated"),
    ],
)
def test_authentication_is_required(fanout: Fanout, header: str | None, code: str) -> None:
    client = StarlingClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/timeline")
    assert response.status_code == 401 and response.json()["error"]["code"] == code
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_revoked_tokens_are_refused_without_the_database(
    fanout: Fanout, redis_client: redis.Redis, django_assert_num_queries: Callable[..., Any]
) -> None:
    ann = UserFactory(username="ann")
    fanout.apply(events.Followed(ann.pk, ann.pk))
    client = client_for(ann)
    redis_client.set(f"starling:tokens:{ann.pk}", 2**40)  # tokens issued before this are void
    with django_assert_num_queries(0):
        response = client.get("/api/v1/timeline")
    assert response.status_code == 401 and "revoked" in response.json()["error"]["message"]


def expected_page(user: User, count: int = 50) -> list[int]:
    """The join for one user straight from SQL: own tweets and followees'."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.id FROM feed_tweet t WHERE t.author_id = %s OR t.author_id IN "
            "(SELECT followee_id FROM feed_follow WHERE follower_id = %s) "
            "ORDER BY t.id DESC LIMIT %s",
            [user.pk, user.pk, count],
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_cold_timeline_answers_from_the_database_and_is_regenerated(fanout: Fanout) -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    follow_create(follower=bob, followee=ann)
    follow_create(follower=bob, followee=cat)
    for user in (ann, bob, cat, ann):
        posted(user, f"by {user.username}")
    before = OutboxEvent.objects.count()
    response = client_for(bob).get("/api/v1/timeline")  # bob's timeline is not in Redis
    assert response.status_code == 200 and response["X-Starling-Source"] == "fallback"
    assert [t["id"] for t in response.json()["tweets"]] == expected_page(bob)
    # One reset of bob's timeline, computed by the database: no follow re-published.
    (reset,) = OutboxEvent.objects.order_by("id")[before:]
    assert (reset.topic, reset.key) == ("timelines", str(bob.pk))
    assert sorted(orjson.loads(reset.value or "{}")["ids"]) == sorted(expected_page(bob))
    client_for(bob).get("/api/v1/timeline")
    assert OutboxEvent.objects.count() == before + 1  # asked once per window, not per read


def test_an_idle_user_gets_no_fanout_and_comes_back_through_a_regeneration(
    fanout: Fanout, redis_client: redis.Redis
) -> None:
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    follow_create(follower=bob, followee=ann)
    first = posted(ann, "before")
    fanout.apply(events.Followed(bob.pk, bob.pk), events.Followed(bob.pk, ann.pk), first)
    User.objects.filter(pk=bob.pk).update(last_active=timezone.now() - timedelta(days=31))
    out = io.StringIO()
    call_command("drop_idle_timelines", "--json", stdout=out)
    assert orjson.loads(out.getvalue()) == {"dropped": 1}  # bob; ann was seen today
    assert fanout.store.timeline(fanout.generation, bob.pk) is None
    later = posted(ann, "while bob was away")
    fanout.apply(later)  # no write to bob's dropped timeline
    assert fanout.store.timeline(fanout.generation, bob.pk) is None
    before = OutboxEvent.objects.count()
    response = client_for(bob).get("/api/v1/timeline")  # bob is back
    assert response.status_code == 200 and response["X-Starling-Source"] == "fallback"
    assert [t["id"] for t in response.json()["tweets"]] == [later.tweet_id, first.tweet_id]
    assert User.objects.get(pk=bob.pk).last_active > timezone.now() - timedelta(minutes=1)
    (reset,) = OutboxEvent.objects.order_by("id")[before:]
    value = None if reset.value is None else reset.value.encode()
    envelope = events.decode_record(
        reset.topic, reset.key.encode(), value, reset.pk, reset.join_key
    )
    fanout.apply(envelope.event, seq=envelope.seq)
    response = client_for(bob).get("/api/v1/timeline")
    assert response["X-Starling-Source"] == "redis"
    assert [t["id"] for t in response.json()["tweets"]] == [later.tweet_id, first.tweet_id]


def test_activity_is_one_redis_write_a_day_not_one_per_read(
    fanout: Fanout, redis_client: redis.Redis
) -> None:
    bob = UserFactory(username="bob")
    fanout.apply(events.Followed(bob.pk, bob.pk))
    client = client_for(bob)

    def sets() -> int:
        stats = redis_client.info("commandstats").get("cmdstat_set", {})
        return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0

    before = sets()
    client.get("/api/v1/timeline")
    assert sets() == before + 1  # the day's mark
    for _ in range(5):
        client.get("/api/v1/timeline")
    assert sets() == before + 1


def test_after_redis_is_flushed_reads_still_get_the_right_timeline(
    fanout: Fanout, redis_client: redis.Redis
) -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    follow_create(follower=bob, followee=ann)
    evs = [posted(ann, "a1"), posted(bob, "b1"), posted(ann, "a2")]
    fanout.apply(events.Followed(bob.pk, bob.pk), events.Followed(bob.pk, ann.pk), *evs)
    tweet_delete(tweet_id=evs[0].tweet_id, actor=ann)
    redis_client.flushall()
    response = client_for(bob).get("/api/v1/timeline?count=2")
    assert response.status_code == 200 and response["X-Starling-Source"] == "fallback"
    page = response.json()
    assert (
        [t["id"] for t in page["tweets"]]
        == expected_page(bob, 2)
        == [evs[2].tweet_id, evs[1].tweet_id]
    )
    assert page["next_max_id"] is None  # nothing older: no cursor to an empty page


def test_reads_fall_back_to_the_database_when_redis_is_down(
    settings, starling: StarlingConfig
) -> None:
    from dataclasses import replace

    ann = UserFactory(username="ann")
    posted(ann, "still readable")
    settings.STARLING = replace(starling, redis_url="redis://127.0.0.1:1/0")
    response = client_for(ann).get("/api/v1/timeline")
    assert response.status_code == 200 and response["X-Starling-Source"] == "fallback"
    assert [t["text"] for t in response.json()["tweets"]] == ["still readable"]


def wsgi_get(
    path: str, query: str = "", *, in_transaction: bool = True, **environ: str
) -> tuple[str, dict[str, str], bytes]:
    from feed.wsgi import application

    captured: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        captured["status"], captured["headers"] = status, dict(headers)

    env = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "HTTP_HOST": "localhost",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
        **environ,
    }
    if not in_transaction:
        body = b"".join(application(env, start_response))
        return captured["status"], captured["headers"], body
    # As Django's test client does: a request must not close the test's
    # connection (its transaction is rolled back after the test).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        body = b"".join(application(env, start_response))
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    return captured["status"], captured["headers"], body


def test_the_wsgi_fast_path_answers_like_the_django_view(fanout: Fanout) -> None:
    ann = UserFactory(username="ann")
    fanout.apply(events.Followed(ann.pk, ann.pk), posted(ann, "hello"), seq=3)
    token = issue_token(ann)
    status, headers, body = wsgi_get(
        "/api/v1/timeline", "count=5", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    django = client_for(ann).get("/api/v1/timeline?count=5")
    assert status == "200 OK" and body == django.content
    assert headers["X-Starling-Watermark"] == "3" and headers["X-Content-Type-Options"] == "nosniff"
    assert wsgi_get(
        "/api/v1/timeline", "", HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="evil.example"
    )[0].startswith("400")
    assert wsgi_get("/api/v1/timeline", "count=0", HTTP_AUTHORIZATION=f"Bearer {token}")[
        0
    ].startswith("400")
    assert wsgi_get("/api/v1/timeline", "")[0].startswith("401")
    status, _, body = wsgi_get(
        "/api/v1/timeline", "", REQUEST_METHOD="POST", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert status.startswith("405") and orjson.loads(body)["error"]["code"] == "method_not_allowed"
    # Everything else is Django's.
    assert wsgi_get("/api/v1/users/ann")[0] == "200 OK"


def test_every_response_names_its_request_id(fanout: Fanout) -> None:
    """The fast path and Django both: the client's X-Request-ID if it looks like
    one, else a new one (log records made meanwhile carry it: fanout.logs)."""
    ann = UserFactory(username="ann")
    fanout.apply(events.Followed(ann.pk, ann.pk), seq=1)
    token = issue_token(ann)
    _, headers, _ = wsgi_get(
        "/api/v1/timeline", "", HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_X_REQUEST_ID="r-1"
    )
    assert headers["X-Request-ID"] == "r-1"
    _, headers, _ = wsgi_get("/api/v1/timeline", "", HTTP_X_REQUEST_ID="not an id")
    assert len(headers["X-Request-ID"]) == 32
    django = client_for(ann).get("/api/v1/users/ann", HTTP_X_REQUEST_ID="r-2")
    assert django["X-Request-ID"] == "r-2"
    assert len(client_for(ann).get("/api/v1/users/ann")["X-Request-ID"]) == 32


def test_store_read_page_reports_cold_and_nogen(
    starling: StarlingConfig, redis_client: redis.Redis
) -> None:
    store: TimelineStore = store_for(starling)
    assert store.read_page(1, count=5).status == "nogen"
    store.ensure_active_generation()
    assert store.read_page(1, count=5).status == "cold"


def test_reads_survive_a_script_flush_and_a_killed_connection(
    fanout: Fanout, redis_client: redis.Redis
) -> None:
    ann = UserFactory(username="ann")
    t1 = posted(ann, "still here")
    fanout.apply(events.Followed(ann.pk, ann.pk), t1)
    client = client_for(ann)
    assert client.get("/api/v1/timeline").json()["tweets"][0]["id"] == t1.tweet_id
    redis_client.script_flush()  # NOSCRIPT: the script is loaded again
    response = client.get("/api/v1/timeline")
    assert response["X-Starling-Source"] == "redis"
    assert response.json()["tweets"][0]["id"] == t1.tweet_id
    redis_client.client_kill_filter(skipme=True)  # the held connection dies: reconnect
    response = client.get("/api/v1/timeline")
    assert response["X-Starling-Source"] == "redis"
    assert response.json()["tweets"][0]["id"] == t1.tweet_id


def test_remembered_tokens_still_expire(settings, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from django.core import signing

    from feed import auth

    settings.STARLING_TOKEN_TTL = 60
    monkeypatch.setattr(auth, "_verified", {})  # the same token may be remembered already
    ann = UserFactory(username="ann")
    token = issue_token(ann)
    assert auth.verify_token_cached(token)[0] == ann.pk  # checked once, then remembered
    later = types.SimpleNamespace(time=lambda: time.time() + 61)
    monkeypatch.setattr(auth, "time", later)
    monkeypatch.setattr(signing, "time", later)
    with pytest.raises(auth.InvalidToken, match="expired"):
        auth.verify_token_cached(token)
    response = StarlingClient().get("/api/v1/timeline", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 401 and "expired" in response.json()["error"]["message"]


def test_revoking_tokens_refuses_them_on_writes_and_on_the_read_path(
    fanout: Fanout, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    ann = UserFactory(username="ann")
    fanout.apply(events.Followed(ann.pk, ann.pk))
    old = client_for(ann)
    assert old.get("/api/v1/timeline").status_code == 200
    time.sleep(1.05)  # tokens are timestamped to the second
    with django_capture_on_commit_callbacks(execute=True):
        assert old.post("/api/v1/auth/revoke").status_code == 204
    read = old.get("/api/v1/timeline")
    assert read.status_code == 401 and "revoked" in read.json()["error"]["message"]
    write = old.post("/api/v1/tweets", {"text": "as ann"}, format="json")
    assert write.status_code == 401 and "revoked" in write.json()["error"]["message"]
    time.sleep(1.05)
    fresh = client_for(ann)  # a token issued after the revocation works
    assert fresh.get("/api/v1/timeline").status_code == 200


def test_revocations_come_back_after_redis_lost_them(
    fanout: Fanout,
    redis_client: redis.Redis,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    from feed.services import revocations_restore, tokens_revoke

    ann = UserFactory(username="ann")
    old = client_for(ann)
    time.sleep(1.05)  # tokens are timestamped to the second
    with django_capture_on_commit_callbacks(execute=True):
        tokens_revoke(user=ann)
    redis_client.flushall()  # Redis lost everything, the revocation with it
    fanout = Fanout(fanout.store_config)
    fanout.apply(events.Followed(ann.pk, ann.pk))  # the timeline is back (a rebuild)
    assert old.get("/api/v1/timeline").status_code == 200  # the hole being closed
    assert revocations_restore() == 1  # what the rebuild command does first
    assert old.get("/api/v1/timeline").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_a_fast_path_worker_recovers_its_database_connection_after_a_server_restart(
    starling: StarlingConfig,
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("terminates a PostgreSQL backend")
    store_for(starling).ensure_active_generation()
    ann = UserFactory(username="ann")
    posted(ann, "from the database")
    token = issue_token(ann)
    worker = ThreadPoolExecutor(max_workers=1)  # one server thread, its own connection

    def read() -> str:
        # A cold timeline: every read queries the database.
        status, _, _ = wsgi_get(
            "/api/v1/timeline", "", in_transaction=False, HTTP_AUTHORIZATION=f"Bearer {token}"
        )
        return status

    def backend_pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    try:
        assert worker.submit(read).result() == "200 OK"
        pid = worker.submit(backend_pid).result()
        with connection.cursor() as cursor:  # what a database restart does to it
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        worker.submit(read).result()  # may fail: the connection is found broken
        assert [worker.submit(read).result() for _ in range(3)] == ["200 OK"] * 3
    finally:
        worker.submit(lambda: connection.close()).result()
        worker.shutdown()


def test_a_password_change_ends_every_session_reads_included(
    fanout: Fanout, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    ann = UserFactory(username="ann")  # its password: the factory's PASSWORD
    fanout.apply(events.Followed(ann.pk, ann.pk))
    stolen, mine = client_for(ann), client_for(ann)
    assert stolen.get("/api/v1/timeline").status_code == 200
    time.sleep(1.05)  # tokens are timestamped to the second
    wrong = mine.post(
        "/api/v1/auth/password",
        {"old_password": "guess", "new_password": "brand-new-secret-9"},
        format="json",
    )
    assert wrong.status_code == 400 and "old_password" in wrong.json()["error"]["fields"]
    weak = mine.post(
        "/api/v1/auth/password",
        {"old_password": PASSWORD, "new_password": "123"},
        format="json",
    )
    assert weak.status_code == 400 and "new_password" in weak.json()["error"]["fields"]
    with django_capture_on_commit_callbacks(execute=True):
        done = mine.post(
            "/api/v1/auth/password",
            {"old_password": PASSWORD, "new_password": "brand-new-secret-9"},
            format="json",
        )
    assert done.status_code == 204 and not done.content  # no token: sign in again
    for client in (stolen, mine):
        assert client.get("/api/v1/timeline").status_code == 401
        assert client.post("/api/v1/tweets", {"text": "x"}, format="json").status_code == 401
    signed_in = StarlingClient().post(
        "/api/v1/auth/token",
        {"username": "ann", "password": "brand-new-secret-9"},
        format="json",
    )
    assert signed_in.status_code == 200
    time.sleep(1.05)
    assert client_for(ann).get("/api/v1/timeline").status_code == 200


def test_a_revocation_whose_copy_to_redis_failed_is_repaired_by_beat(
    fanout: Fanout, settings, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    from dataclasses import replace

    from feed.services import tokens_revoke
    from feed.tasks import restore_revocations

    ann = UserFactory(username="ann")
    fanout.apply(events.Followed(ann.pk, ann.pk))
    old = client_for(ann)
    time.sleep(1.05)  # tokens are timestamped to the second
    working = settings.STARLING
    settings.STARLING = replace(working, redis_url="redis://127.0.0.1:1/0")  # Redis away
    with django_capture_on_commit_callbacks(execute=True):
        tokens_revoke(user=ann)  # committed; the copy to Redis fails, and is logged
    settings.STARLING = working
    assert old.get("/api/v1/timeline").status_code == 200  # the hole being closed
    assert restore_revocations() >= 1  # beat's period
    assert old.get("/api/v1/timeline").status_code == 401
