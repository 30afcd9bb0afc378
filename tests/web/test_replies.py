"""Replies, threads and mentions on the web side (feed.conversations): the
endpoints and their refusals, the rows and outbox events a reply leaves,
the tweet object's ``in_reply_to`` and ``mentions`` wherever it is
rendered (the database's renderer and the cached body's read alike), the
replies' count, the thread, and the writes that post tweets again (rename,
suspension and reinstatement, republish), with the names as written."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fanout.config import StarlingConfig
from fanout.model import events, ids
from fanout.model.join import Mutation, Op
from fanout.store.reads import compose
from fanout.store.timelines import store_for
from feed import conversations, moderation, relations, selectors, services, view_sql
from feed.errors import Forbidden
from feed.models import DeletedReply, Mention, Tweet, User
from tests.support import postgres
from tests.support.clients import client_for
from tests.support.factories import ModeratorFactory, UserFactory
from tests.web.test_api import assert_error
from tests.web.test_reposts_likes import high, outbox_after, post

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


def users(*names: str) -> list[User]:
    return [UserFactory(username=name) for name in names]


def reply(user: User, parent: int, text: str = "a reply") -> int:
    return services.tweet_create(author=user, text=text, in_reply_to=parent).tweet.id


def posted_events(seq: int) -> list[events.TweetPosted]:
    return [e for e in outbox_after(seq) if isinstance(e, events.TweetPosted)]


def create(user: User, **fields: Any) -> Any:
    """``POST /api/v1/tweets`` as ``user`` with these fields."""
    return client_for(user).post("/api/v1/tweets", fields, format="json")


def thread(tweet_id: int, reader: User | None = None, query: str = "") -> dict[str, Any]:
    response = client_for(reader).get(f"/api/v1/tweets/{tweet_id}/thread{query}")
    assert response.status_code == 200, response.content
    return response.json()


# --- writing a reply ------------------------------------------------------------------


def test_a_reply_names_its_parent_and_its_author_in_the_row_the_event_and_the_answer() -> None:
    ann, bob = users("ann", "bob")
    parent = post(ann, "the parent")
    before = high()
    response = create(bob, text="an answer", in_reply_to=parent)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["in_reply_to"] == {"id": parent, "author": "ann"}
    assert body["mentions"] == [] and body["text"] == "an answer" and body["id"] > parent
    row = Tweet.objects.get(id=body["id"])
    assert (row.in_reply_to, row.reply_to_id, row.author_id) == (parent, ann.pk, bob.pk)
    assert outbox_after(before) == [
        events.TweetPosted(
            body["id"],
            bob.pk,
            "bob",
            "an answer",
            in_reply_to=parent,
            reply_to=ann.pk,
            reply_to_name="ann",
        ),
        # Counted among the parent's replies: the reply is the member.
        events.Engaged(events.REPLY, body["id"], parent),
    ]
    assert body["seq"] == high()
    bob.refresh_from_db()
    assert bob.tweets_count == 1  # a reply is a post
    # The id as a string of digits, as the API's ids may be given.
    again = create(bob, text="again", in_reply_to=str(parent))
    assert again.status_code == 201 and again.json()["in_reply_to"]["id"] == parent


def test_a_reply_to_a_repost_answers_its_original() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    original = post(ann)
    repost = services.repost_create(user=bob, tweet_id=original).repost_id
    before = high()
    written = services.tweet_create(author=cat, text="to the repost", in_reply_to=repost)
    assert written.in_reply_to == (original, "ann")
    row = Tweet.objects.get(id=written.tweet.id)
    assert (row.in_reply_to, row.reply_to_id) == (original, ann.pk)
    # Counted among the original's replies, not the repost's.
    assert outbox_after(before)[1:] == [events.Engaged(events.REPLY, row.id, original)]


def test_a_reply_s_id_is_greater_than_its_parent_s(monkeypatch: pytest.MonkeyPatch) -> None:
    ann, bob = users("ann", "bob")
    parent = post(ann)
    # This host's clock is behind the one that minted the parent.
    monkeypatch.setattr(services, "next_tweet_id", lambda: parent - 1000)
    assert reply(bob, parent) > parent


def test_replying_to_an_unknown_or_deleted_tweet_is_404() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    mod = ModeratorFactory()
    gone = post(ann)
    services.tweet_delete(tweet_id=gone, actor=ann)
    # A repost by a suspended user is no tweet to answer either.
    suspended_repost = services.repost_create(user=cat, tweet_id=post(ann)).repost_id
    moderation.user_suspend(user=cat, moderator=mod, reason="spam")
    before = high()
    for parent in (gone, 12345, suspended_repost):
        response = create(bob, text="hm", in_reply_to=parent)
        assert_error(response, 404, "not_found", mentions=f"no tweet with id {parent}")
    assert high() == before and not Tweet.objects.filter(author=bob).exists()


def test_replying_to_a_suspended_author_s_tweet_is_404() -> None:
    ann, bob = users("ann", "bob")
    parent = post(ann)
    repost = services.repost_create(user=bob, tweet_id=parent).repost_id
    moderation.user_suspend(user=ann, moderator=ModeratorFactory(), reason="spam")
    for target in (parent, repost):
        response = create(bob, text="hm", in_reply_to=target)
        assert_error(response, 404, "not_found")
    assert not Tweet.objects.filter(author=bob, repost_of__isnull=True).exists()


@pytest.mark.parametrize("replier_blocks", [True, False])
def test_a_block_either_way_refuses_the_reply(replier_blocks: bool) -> None:
    ann, bob = users("ann", "bob")
    parent = post(ann)
    blocker, blocked = (bob, ann) if replier_blocks else (ann, bob)
    relations.block_create(blocker=blocker, blocked=blocked)
    before = high()
    response = create(bob, text="hm", in_reply_to=parent)
    assert_error(response, 403, "blocked", mentions="reply to")
    assert high() == before and not Tweet.objects.filter(author=bob).exists()
    # Others may answer; unblocked, bob may too.
    assert reply(UserFactory(username="cat"), parent)
    relations.block_delete(blocker=blocker, blocked=blocked)
    assert reply(bob, parent)


def test_one_may_answer_oneself() -> None:
    (ann,) = users("ann")
    first = post(ann, "a thread, 1/2")
    written = services.tweet_create(author=ann, text="2/2", in_reply_to=first)
    assert written.in_reply_to == (first, "ann")
    assert Tweet.objects.get(id=written.tweet.id).reply_to_id == ann.pk


def test_a_suspended_author_cannot_reply() -> None:
    ann, bob = users("ann", "bob")
    parent = post(ann)
    User.objects.filter(pk=bob.pk).update(is_active=False)
    with pytest.raises(Forbidden, match="suspended"):
        services.tweet_create(author=bob, text="hm", in_reply_to=parent)


@pytest.mark.parametrize(
    "bad", ["abc", "", "12x", "1 2", "-1", -1, 0, 1.5, True, [1], {"id": 1}, 2**60, str(2**60)]
)
def test_an_in_reply_to_that_is_not_a_tweet_id_is_400_naming_the_field(bad: Any) -> None:
    (ann,) = users("ann")
    response = create(ann, text="hm", in_reply_to=bad)
    error = assert_error(response, 400, "invalid", mentions="in_reply_to")
    assert list(error["fields"]) == ["in_reply_to"]
    assert "tweet id" in error["fields"]["in_reply_to"][0]


def test_a_null_in_reply_to_is_a_plain_post() -> None:
    (ann,) = users("ann")
    response = create(ann, text="hm", in_reply_to=None)
    assert response.status_code == 201 and response.json()["in_reply_to"] is None


# --- mentions -----------------------------------------------------------------------------


def test_mentions_are_the_active_users_named_in_the_text_s_order_each_once() -> None:
    ann, bob, cat, dee, sus = users("ann", "Bob", "cat", "dee", "sus")
    User.objects.filter(pk=sus.pk).update(is_active=False)
    before = high()
    text = "@CAT hi @bob, @cat again, @nobody @sus, @ann x@dee @dee@x"
    response = create(ann, text=text)
    assert response.status_code == 201, response.content
    body = response.json()
    # As the users are named (their own case), the author's own mention kept.
    assert body["mentions"] == ["cat", "Bob", "ann"]
    rows = Mention.objects.filter(tweet_id=body["id"]).order_by("id")
    assert list(rows.values_list("user_id", flat=True)) == [cat.pk, bob.pk, ann.pk]
    # The event: the others, ascending; the names as the body shows them.
    (event,) = posted_events(before)
    assert event.mentions == tuple(sorted([cat.pk, bob.pk]))
    assert event.mention_names == ("cat", "Bob", "ann")
    assert dee  # named only in an address and glued to one: not mentioned


def test_a_tweet_keeps_its_first_ten_mentions() -> None:
    (ann,) = users("ann")
    named = users(*(f"u{i}" for i in range(12)))
    text = " ".join(f"@u{i}" for i in range(12))
    written = services.tweet_create(author=ann, text=text)
    assert written.mentions == tuple(f"u{i}" for i in range(10))
    kept = Mention.objects.filter(tweet=written.tweet).values_list("user_id", flat=True)
    assert set(kept) == {u.pk for u in named[:10]}


def test_a_tweet_naming_no_one_and_answering_nothing_reads_and_locks_nothing() -> None:
    (ann,) = users("ann")
    services.tweet_create(author=ann, text="warm-up")
    with CaptureQueriesContext(connection) as queries:
        services.tweet_create(author=ann, text="no one named, mail me at x@y")
    reads = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().startswith("SELECT")]
    # PostgreSQL: the outbox's transaction id (feed.outbox), nothing else.
    assert all("pg_current_xact_id" in sql for sql in reads), reads
    assert not Mention.objects.exists()


@pytest.mark.skipif(postgres.database_kind() != "postgres", reason="PostgreSQL's row locks")
def test_a_tweet_locks_no_row_of_the_users_it_mentions() -> None:
    """The names a tweet mentions are kept as written: nothing serializes it
    with a rename or a suspension of those users. A reply locks the rows of
    its writer and of its parent's author (suspensions, blocks), no other."""
    ann, bob, *_ = users("ann", "bob", "cat", "dee")
    parent = post(ann)
    for in_reply_to, locked in ((None, set()), (parent, {ann.pk, bob.pk})):
        with CaptureQueriesContext(connection) as queries:
            written = services.tweet_create(
                author=bob, text="@cat @dee hi", in_reply_to=in_reply_to
            )
        assert written.mentions == ("cat", "dee")
        statements = [q["sql"] for q in queries.captured_queries]
        user_locks = [sql for sql in statements if '"feed_user"' in sql and " FOR " in sql]
        ids_locked = {
            int(i) for sql in user_locks for i in re.findall(r"\d+", sql.split(" IN ", 1)[1])
        }
        assert ids_locked == locked, user_locks


# --- the tweet object ---------------------------------------------------------------------


def _cached(tweet_id: int, seq: int, original: bytes | None = None) -> dict[str, Any]:
    """The tweet object the timeline read builds from the cached body the job
    writes for ``tweet_id`` (its event in the outbox after ``seq``)."""
    (event,) = [e for e in posted_events(seq) if e.tweet_id == tweet_id]
    counts = orjson.dumps(selectors.ZERO_COUNTS)
    composed = compose(events.tweet_json(event), original, counts)
    assert composed is not None
    return orjson.loads(composed)


def test_a_reply_s_fields_are_the_same_in_every_rendering() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    relations.follow_create(follower=cat, followee=bob)
    relations.follow_create(follower=cat, followee=ann)  # bob's reply to ann shows to cat
    parent = post(ann, "the parent")
    before = high()
    created = create(bob, text="@ann @cat see", in_reply_to=parent)
    assert created.status_code == 201, created.content
    body = created.json()
    del body["seq"]
    answer = body["id"]
    assert body["in_reply_to"] == {"id": parent, "author": "ann"}
    assert body["mentions"] == ["ann", "cat"]
    assert client_for().get(f"/api/v1/tweets/{answer}").json() == body
    assert client_for().get("/api/v1/users/bob/tweets").json()["tweets"] == [body]
    page = view_sql.timeline_page(cat.pk, _query(count=10))
    assert page["tweets"][0] == body  # above ann's post
    # The timeline read's object, from the body the job caches: the same.
    assert _cached(answer, before) == body
    # A repost of the reply shows what the reply answers and mentions, as its text.
    seq = high()
    repost = services.repost_create(user=cat, tweet_id=answer).repost_id
    shown = client_for().get(f"/api/v1/tweets/{repost}").json()
    assert shown["in_reply_to"] == body["in_reply_to"] and shown["mentions"] == body["mentions"]
    assert shown["repost_of"]["id"] == answer and shown["text"] == "@ann @cat see"
    original_body = events.tweet_json(
        next(e for e in posted_events(before) if e.tweet_id == answer)
    )
    assert _cached(repost, seq, original_body) == shown
    services.like_create(user=cat, tweet_id=answer)
    assert client_for().get("/api/v1/users/cat/likes").json()["tweets"] == [body]


def _timeline_from_redis(starling: StarlingConfig, reader: User, seq: int) -> list[dict[str, Any]]:
    """``reader``'s timeline page served from Redis, once the job's part is
    done here: each tweet's body cached from its last changelog record after
    ``seq`` (as the job upserts it), and the reader's timeline holding every
    entry those records post (the read keeps one per original)."""
    written = {e.tweet_id: e for e in posted_events(seq)}  # the last record of each
    store = store_for(starling)
    generation = store.ensure_active_generation()
    store.apply(
        generation,
        {t: events.tweet_json(e) for t, e in written.items()},
        [
            Mutation(
                Op.ADD,
                (reader.pk,),
                tuple(sorted(written)),
                0,
                high(),
                reposts=tuple(
                    (e.tweet_id, e.repost_of, e.repost_of_author)
                    for e in written.values()
                    if e.repost_of
                ),
            )
        ],
    )
    response = client_for(reader).get("/api/v1/timeline?count=10")
    assert response["X-Starling-Source"] == "redis", response.content
    tweets: list[dict[str, Any]] = response.json()["tweets"]
    return tweets


def test_a_timeline_page_from_redis_shows_replies_as_the_database_s_page_does(
    starling: StarlingConfig,
) -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    for followee in (ann, bob):
        relations.follow_create(follower=cat, followee=followee)
    before = high()
    parent = post(ann, "the parent")
    answer = reply(bob, parent, "@ann @cat @nobody look")
    reply(ann, answer, "@bob thanks")
    services.repost_create(user=ann, tweet_id=answer)
    from_redis = _timeline_from_redis(starling, cat, before)
    assert len(from_redis) == 3 and from_redis[0]["repost_of"]["id"] == answer
    assert from_redis[0]["in_reply_to"] == {"id": parent, "author": "ann"}
    assert from_redis == view_sql.timeline_page(cat.pk, _query(count=10))["tweets"]


def test_a_post_s_fields_are_null_and_empty_in_every_rendering() -> None:
    (ann,) = users("ann")
    before = high()
    tweet = post(ann, "plain")
    got = client_for().get(f"/api/v1/tweets/{tweet}").json()
    assert got["in_reply_to"] is None and got["mentions"] == []
    assert _cached(tweet, before) == got


def test_a_reply_keeps_what_it_answered_when_its_parent_is_deleted() -> None:
    ann, bob = users("ann", "bob")
    parent = post(ann)
    answer = reply(bob, parent)
    services.tweet_delete(tweet_id=parent, actor=ann)
    got = client_for().get(f"/api/v1/tweets/{answer}").json()
    assert got["in_reply_to"] == {"id": parent, "author": "ann"}
    assert Tweet.objects.get(id=answer).in_reply_to == parent


def test_replies_are_counted_by_the_database(settings: Any, starling: StarlingConfig) -> None:
    ann, bob, cat, dee = users("ann", "bob", "cat", "dee")
    parent = post(ann)
    repost = services.repost_create(user=bob, tweet_id=parent).repost_id
    reply(bob, parent)
    reply(cat, repost)  # answers the original
    gone = reply(dee, parent)
    services.tweet_delete(tweet_id=gone, actor=dee)
    reply(dee, parent)
    suspended = UserFactory(username="sus")
    reply(suspended, parent)
    User.objects.filter(pk=suspended.pk).update(is_active=False)
    nested = reply(ann, reply(bob, parent))  # a reply to a reply is not the parent's
    assert nested
    # The database counts when Redis is unreachable.
    settings.STARLING = replace(starling, redis_url="redis://127.0.0.1:1/0")
    got = client_for().get(f"/api/v1/tweets/{parent}").json()
    assert got["counts"] == {"likes": 0, "reposts": 1, "replies": 4}
    assert client_for().get(f"/api/v1/tweets/{repost}").json()["counts"]["replies"] == 4


def _reply_engagements(seq: int) -> list[events.Event]:
    """The reply engagements written after ``seq``, in order."""
    return [
        e
        for e in outbox_after(seq)
        if isinstance(e, events.Engaged | events.Disengaged) and e.kind == events.REPLY
    ]


def test_a_deleted_reply_is_no_longer_counted_and_a_deleted_parent_counts_none() -> None:
    """A reply's delete tombstones its engagement. A parent's delete
    tombstones its direct replies' engagements (they stay, and still name
    it; a reply to one of them is that reply's, not the parent's), and its
    own if it answers a post."""
    ann, bob, cat = users("ann", "bob", "cat")
    root = post(ann, "root")
    parent = reply(ann, root, "the parent")
    first, second = reply(bob, parent), reply(cat, parent)
    nested = reply(ann, first)
    gone = reply(bob, parent)
    alone = post(cat, "unanswered")
    before = high()
    services.tweet_delete(tweet_id=gone, actor=bob)
    assert outbox_after(before) == [
        events.TweetDeleted(gone, bob.pk),
        events.Disengaged(events.REPLY, gone, parent),
    ]
    before = high()
    services.tweet_delete(tweet_id=parent, actor=ann)
    assert outbox_after(before) == [
        events.TweetDeleted(parent, ann.pk),
        events.Disengaged(events.REPLY, first, parent),
        events.Disengaged(events.REPLY, second, parent),
        events.Disengaged(events.REPLY, parent, root),
    ]
    assert set(Tweet.objects.values_list("id", flat=True)) == {root, first, second, nested, alone}
    assert Tweet.objects.get(id=first).in_reply_to == parent
    # A post that answers nothing and is answered by nothing: no reply record.
    before = high()
    services.tweet_delete(tweet_id=alone, actor=cat)
    assert _reply_engagements(before) == []


def test_a_suspension_tombstones_a_user_s_replies_and_a_reinstatement_counts_them_again() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    mod = ModeratorFactory()
    kept, dropped = post(ann), post(cat)
    answer, other, own = reply(bob, kept), reply(bob, dropped), reply(bob, kept)
    answered = reply(ann, answer)  # a reply to bob's: ann's, not bob's
    before = high()
    moderation.user_suspend(user=bob, moderator=mod, reason="x")
    assert _reply_engagements(before) == [
        events.Disengaged(events.REPLY, answer, kept),
        events.Disengaged(events.REPLY, other, dropped),
        events.Disengaged(events.REPLY, own, kept),
    ]
    # Deleted while bob is suspended: no parent, no count to come back to.
    services.tweet_delete(tweet_id=dropped, actor=cat)
    before = high()
    moderation.user_reinstate(user=bob, moderator=mod)
    assert _reply_engagements(before) == [
        events.Engaged(events.REPLY, answer, kept),
        events.Engaged(events.REPLY, own, kept),
    ]
    # ann's reply to bob's counts throughout; the republish posts it again.
    before = high()
    call_command("republish_changelogs", stdout=io.StringIO())
    assert _reply_engagements(before) == [
        events.Engaged(events.REPLY, answer, kept),
        events.Engaged(events.REPLY, own, kept),
        events.Engaged(events.REPLY, answered, answer),
    ]
    # A suspended replier's replies are not republished.
    moderation.user_suspend(user=ann, moderator=mod, reason="x")
    before = high()
    call_command("republish_changelogs", stdout=io.StringIO())
    assert _reply_engagements(before) == [
        events.Engaged(events.REPLY, answer, kept),
        events.Engaged(events.REPLY, own, kept),
    ]


# --- the thread ---------------------------------------------------------------------------


def test_a_thread_shows_the_chain_above_from_the_root_and_the_replies_below() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    root = post(ann, "root")
    first = reply(bob, root, "first")
    second = reply(cat, first, "second")
    below = reply(ann, second, "below")
    aside = reply(bob, root, "aside")
    got = thread(second)
    assert [t["id"] for t in got["ancestors"]] == [root, first]
    assert got["ancestors"][1]["in_reply_to"] == {"id": root, "author": "ann"}
    assert got["tweet"] == client_for().get(f"/api/v1/tweets/{second}").json()
    assert [t["id"] for t in got["replies"]] == [below] and got["next_cursor"] is None
    top = thread(root)
    assert top["ancestors"] == [] and [t["id"] for t in top["replies"]] == [first, aside]


def test_a_repost_s_thread_is_its_original_s() -> None:
    ann, bob = users("ann", "bob")
    root = post(ann)
    answer = reply(bob, root)
    repost = services.repost_create(user=bob, tweet_id=root).repost_id
    got = thread(repost)
    assert got["tweet"]["id"] == root and [t["id"] for t in got["replies"]] == [answer]


def test_a_deleted_or_suspended_ancestor_shows_as_deleted_and_the_chain_goes_on() -> None:
    ann, bob, cat, dee = users("ann", "bob", "cat", "dee")
    root = post(ann, "root")
    first = reply(bob, root)
    second = reply(cat, first)
    third = reply(dee, second)
    services.tweet_delete(tweet_id=first, actor=bob)
    assert DeletedReply.objects.get(id=first).in_reply_to == root
    moderation.user_suspend(user=cat, moderator=ModeratorFactory(), reason="spam")
    got = thread(third)
    assert got["ancestors"][0]["id"] == root and got["ancestors"][0]["text"] == "root"
    assert got["ancestors"][1:] == [{"id": first, "deleted": True}, {"id": second, "deleted": True}]
    # A deleted reply that no one answered leaves nothing behind.
    lonely = reply(bob, root)
    services.tweet_delete(tweet_id=lonely, actor=bob)
    assert not DeletedReply.objects.filter(id=lonely).exists()


def test_a_thread_shows_the_nearest_fifty_ancestors(django_assert_max_num_queries: Any) -> None:
    ann, bob = users("ann", "bob")
    chain = [post(ann, "0")]
    for n in range(1, 55):
        chain.append(reply(bob if n % 2 else ann, chain[-1], str(n)))
    for n in range(5):
        reply(UserFactory(username=f"r{n}"), chain[-1], f"@ann @bob {n}")
    assert conversations.MAX_ANCESTORS == 50
    with django_assert_max_num_queries(8):  # whatever the chain's length and the page's size
        response = client_for(bob).get(f"/api/v1/tweets/{chain[-1]}/thread")
    got = response.json()
    assert [t["id"] for t in got["ancestors"]] == chain[4:54]
    # The first one shown says what it answers: there is more above.
    assert got["ancestors"][0]["in_reply_to"]["id"] == chain[3]
    assert len(got["replies"]) == 5 and all(r["mentions"] == ["ann", "bob"] for r in got["replies"])
    assert [t["id"] for t in thread(chain[50])["ancestors"]] == chain[0:50]


def test_replies_are_paged_oldest_first_without_a_gap_or_a_repeat() -> None:
    ann, bob = users("ann", "bob")
    root = post(ann)
    answers = [reply(bob if n % 2 else ann, root, str(n)) for n in range(7)]
    reply(bob, answers[0], "nested: not a direct reply")
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        query = "?count=3" + (f"&cursor={cursor}" if cursor else "")
        got = thread(root, query=query)
        assert len(got["replies"]) <= 3
        seen += [t["id"] for t in got["replies"]]
        cursor = got["next_cursor"]
        pages += 1
        if cursor is None:
            break
    assert seen == answers and pages == 3
    for bad in ("?count=0", "?count=201", "?cursor=x"):
        assert_error(client_for().get(f"/api/v1/tweets/{root}/thread{bad}"), 400, "invalid")


def test_replies_leave_out_whom_the_reader_blocks_is_blocked_by_or_mutes_and_suspended_users() -> (
    None
):
    ann, bob, blocked, blocker, muted, sus, other = users(
        "ann", "bob", "blocked", "blocker", "muted", "sus", "other"
    )
    root = post(ann)
    by = {u.username: reply(u, root) for u in (blocked, blocker, muted, sus, other, bob)}
    relations.block_create(blocker=bob, blocked=blocked)
    relations.block_create(blocker=blocker, blocked=bob)
    relations.mute_create(muter=bob, muted=muted)
    moderation.user_suspend(user=sus, moderator=ModeratorFactory(), reason="spam")
    mine = [t["id"] for t in thread(root, bob)["replies"]]
    assert mine == [by["other"], by["bob"]]
    everyone = [t["id"] for t in thread(root)["replies"]]
    assert everyone == [by[n] for n in ("blocked", "blocker", "muted", "other", "bob")]
    assert [t["id"] for t in thread(root, other)["replies"]] == everyone


def test_an_ancestor_whose_author_blocks_the_reader_is_not_shown() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    root = post(cat, "root")
    first = reply(ann, root)
    second = reply(cat, first)
    relations.block_create(blocker=ann, blocked=bob)
    got = thread(second, bob)
    assert got["ancestors"][0]["id"] == root
    assert got["ancestors"][1] == {"id": first, "blocked": True}
    assert thread(second, cat)["ancestors"][1]["id"] == first


def test_a_thread_of_what_is_not_there_is_404_and_of_a_blocker_s_tweet_403() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    gone = post(ann)
    services.tweet_delete(tweet_id=gone, actor=ann)
    suspended = post(cat)
    moderation.user_suspend(user=cat, moderator=ModeratorFactory(), reason="spam")
    for tweet_id in (gone, 12345, suspended, 2**60):
        assert_error(client_for().get(f"/api/v1/tweets/{tweet_id}/thread"), 404, "not_found")
    tweet = post(ann)
    relations.block_create(blocker=ann, blocked=bob)
    assert_error(client_for(bob).get(f"/api/v1/tweets/{tweet}/thread"), 403, "blocked")
    # The blocker, anyone else and anonymous readers read it.
    for reader in (ann, UserFactory(username="dee"), None):
        assert client_for(reader).get(f"/api/v1/tweets/{tweet}/thread").status_code == 200


def _plan(sql: str, params: list[Any]) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # tiny tables: no index otherwise
            cursor.execute(f"EXPLAIN {sql}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row) for row in cursor.fetchall())


def test_the_thread_s_queries_are_index_look_ups() -> None:
    ann, bob = users("ann", "bob")
    root = post(ann)
    answer = reply(bob, root, "@ann")
    replies_sql, params = conversations.replies_query(
        root, bob, cursor=None
    ).query.sql_with_params()
    plans = {
        "replies": _plan(replies_sql, list(params)),
        "ancestors": _plan(conversations._ANCESTORS_SQL, [answer, 50]),
    }
    if connection.vendor == "postgresql":
        for name, plan in plans.items():
            assert "Seq Scan on feed_tweet" not in plan, (name, plan)
        assert "tweet_in_reply_to_id_idx" in plans["replies"]
        assert "feed_tweet_pkey" in plans["ancestors"]
    else:
        for name, plan in plans.items():
            assert "SCAN feed_tweet" not in plan and "SCAN t " not in plan, (name, plan)
        assert "tweet_in_reply_to_id_idx" in plans["replies"]


# --- posting tweets again -----------------------------------------------------------------


def test_a_rename_posts_again_only_the_user_s_own_tweets_others_keep_the_names_as_written(
    starling: StarlingConfig,
) -> None:
    ann, bob, cat, dee = users("ann", "bob", "cat", "dee")
    for followee in (ann, bob, cat):
        relations.follow_create(follower=dee, followee=followee)
    start = high()
    parent = post(ann, "the parent")
    answer = reply(bob, parent, "@ann @cat look")
    mentioning = post(cat, "hey @ann")
    own = reply(ann, answer, "@bob @ann thanks")
    repost = services.repost_create(user=ann, tweet_id=answer).repost_id
    before = high()
    services.user_rename(user=ann, username="anne")
    # ann's own entries, and nothing else: her posts under her new name (a
    # reply with what it answers and mentions, the names as written, her own
    # old one too) and her repost.
    again = posted_events(before)
    assert outbox_after(before) == again
    assert [e.tweet_id for e in again] == [parent, own, repost]
    assert {(e.author_id, e.author) for e in again} == {(ann.pk, "anne")}
    by_id = {e.tweet_id: e for e in again}
    assert (by_id[own].in_reply_to, by_id[own].reply_to, by_id[own].reply_to_name) == (
        answer,
        bob.pk,
        "bob",
    )
    assert by_id[own].mention_names == ("bob", "ann") and by_id[own].mentions == (bob.pk,)
    assert by_id[repost].repost_of == answer
    assert by_id[repost].repost_of_reply_to == ann.pk  # whom bob's reply answers
    # Another rename: cat's own tweet only, still naming ann as written.
    before_cat = high()
    services.user_rename(user=cat, username="kat")
    (cats,) = outbox_after(before_cat)
    assert isinstance(cats, events.TweetPosted)
    assert (cats.tweet_id, cats.author, cats.mention_names) == (mentioning, "kat", ("ann",))
    # The database's objects: what others wrote shows the names as written...
    got = {t: client_for().get(f"/api/v1/tweets/{t}").json() for t in (answer, own, repost)}
    assert got[answer]["author"] == "bob"
    assert got[answer]["in_reply_to"] == {"id": parent, "author": "ann"}
    assert got[answer]["mentions"] == ["ann", "cat"]
    assert got[own]["author"] == "anne" and got[own]["mentions"] == ["bob", "ann"]
    assert got[own]["in_reply_to"] == {"id": answer, "author": "bob"}
    assert got[repost]["author"] == "anne" and got[repost]["mentions"] == ["ann", "cat"]
    # ... as the bodies cached from the last records do: bob's reply's is still
    # the one it was written with, ann's own tweets' the rename's.
    assert _cached(answer, start) == got[answer]
    assert _cached(own, before) == got[own]
    assert _cached(repost, before, events.tweet_json(_last(answer))) == got[repost]
    # The timeline served from Redis and the database's page agree, and so
    # does the thread (the database's objects).
    from_redis = _timeline_from_redis(starling, dee, start)
    assert from_redis == view_sql.timeline_page(dee.pk, _query(count=10))["tweets"]
    assert [t["id"] for t in from_redis] == [repost, own, mentioning, parent]
    assert from_redis[0]["in_reply_to"] == {"id": parent, "author": "ann"}
    assert from_redis[2]["author"] == "kat" and from_redis[2]["mentions"] == ["ann"]
    shown = thread(answer)
    assert shown["ancestors"][0]["author"] == "anne"
    assert shown["tweet"] == got[answer] and shown["replies"] == [got[own]]


def _last(tweet_id: int) -> events.TweetPosted:
    """The last changelog record of ``tweet_id`` in the outbox."""
    return [e for e in posted_events(0) if e.tweet_id == tweet_id][-1]


def test_a_reinstatement_and_a_republish_post_replies_with_what_they_answer_and_mention() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    parent = post(ann)
    before = high()
    answer = reply(bob, parent, "@cat @bob hm")
    (written,) = posted_events(before)
    assert (written.reply_to_name, written.mention_names) == ("ann", ("cat", "bob"))
    mod = ModeratorFactory()
    moderation.user_suspend(user=bob, moderator=mod, reason="x")
    # The users it answers and mentions renamed meanwhile: it keeps the names as written.
    services.user_rename(user=ann, username="anne")
    services.user_rename(user=cat, username="kat")
    before = high()
    moderation.user_reinstate(user=bob, moderator=mod)
    assert posted_events(before) == [written]
    before = high()
    call_command("republish_changelogs", stdout=io.StringIO())
    republished = {e.tweet_id: e for e in posted_events(before)}
    assert republished[answer] == written
    assert republished[parent] == events.TweetPosted(parent, ann.pk, "anne", "hello")
    assert ids.is_valid(answer)


def test_a_moderator_deletes_a_reply_with_its_mentions_in_the_admin() -> None:
    from django.test import Client

    ann, bob = users("ann", "bob")
    answer = reply(bob, post(ann), "@ann spam")
    moderator = Client()
    moderator.force_login(ModeratorFactory())
    page = moderator.get(f"/admin/feed/tweet/{answer}/delete/")
    assert page.status_code == 200 and b"Cannot delete" not in page.content
    assert moderator.post(f"/admin/feed/tweet/{answer}/delete/", {"post": "yes"}).status_code == 302
    assert not Tweet.objects.filter(id=answer).exists() and not Mention.objects.exists()


def test_the_schema_describes_replies_mentions_and_threads() -> None:
    schema = orjson.loads(client_for().get("/api/schema/?format=json").content)
    components = schema["components"]["schemas"]
    assert {"in_reply_to", "mentions"} <= set(components["TweetOut"]["properties"])
    assert "in_reply_to" in components["TweetCreateInputRequest"]["properties"]
    thread_op = schema["paths"]["/api/v1/tweets/{tweet_id}/thread"]["get"]
    assert {p["name"] for p in thread_op["parameters"]} >= {"count", "cursor", "tweet_id"}
    assert {"200", "403", "404"} <= set(thread_op["responses"])
    out = components["ThreadOutput"]["properties"]
    assert set(out) == {"ancestors", "tweet", "replies", "next_cursor"}
    # An ancestor is one of three shapes, and never two at once (a placeholder
    # requires the flag a tweet object has not).
    shapes = [ref["$ref"].rsplit("/", 1)[1] for ref in components["Ancestor"]["oneOf"]]
    assert shapes == ["TweetOut", "DeletedOut", "BlockedOut"]
    assert set(components["DeletedOut"]["required"]) == {"id", "deleted"}
    assert set(components["BlockedOut"]["required"]) == {"id", "blocked"}


def _query(**kw: Any) -> Any:
    from feed.timeline import TimelineQuery

    return TimelineQuery(**kw)
