"""Read queries against the database (profiles, user tweets and likes, follow
lists, blocks and mutes, what a rebuild verifies against, idle users) and the
one shape of a tweet clients see. The timeline views' SQL is in
:mod:`feed.view_sql`."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import redis
from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Coalesce

from fanout.model import events, ids, owners
from feed.models import Block, Follow, Like, ListMember, Mention, Mute, OutboxEvent, Tweet, User
from feed.models import List as ListRow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Profile:
    user: User
    followers_count: int
    following_count: int
    tweets_count: int


def profile(user: User) -> Profile:
    """The counts the write use-cases keep on the user's row (no COUNT)."""
    return Profile(
        user=user,
        followers_count=user.followers_count,
        following_count=user.following_count,
        tweets_count=user.tweets_count,
    )


def visible_entries(tweets: QuerySet[Tweet]) -> QuerySet[Tweet]:
    """The rows of ``tweets`` that are entries of the view as far as their
    original goes: posts, and reposts whose original's author is active (the
    caller filters the rows' own authors)."""
    return tweets.filter(Q(repost_of__isnull=True) | Q(repost_of__author__is_active=True))


def user_tweets(
    user: User, *, count: int, max_id: int | None = None, since_id: int | None = None
) -> list[int]:
    """A user's entries (posts and reposts), newest first, by the view's rule:
    per original only the greatest entry (their repost of their own post
    hides the post); a repost of a suspended author's tweet is none.
    ``max_id`` is inclusive, ``since_id`` exclusive. The caller checks that
    ``user`` is active."""
    qs = visible_entries(Tweet.objects.filter(author=user))
    own_repost = Tweet.objects.filter(author_id=user.pk, repost_of_id=OuterRef("pk"))
    qs = qs.filter(~Exists(own_repost))
    if max_id is not None:
        qs = qs.filter(id__lte=max_id)
    if since_id is not None:
        qs = qs.filter(id__gt=since_id)
    return list(qs.order_by("-id").values_list("id", flat=True)[:count])


def user_likes(
    user: User, *, count: int, cursor: int | None = None
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the tweets ``user`` liked, newest like first (those of
    active authors), and the cursor of the next page (the like's id; None on
    the last page)."""
    qs = Like.objects.filter(user=user, tweet__author__is_active=True)
    if cursor is not None:
        qs = qs.filter(id__lt=cursor)
    rows = list(qs.order_by("-id").values_list("id", "tweet_id")[: count + 1])
    page = rows[:count]
    tweets = tweet_objects([t for _, t in page])
    return tweets, (page[-1][0] if len(rows) > count else None)


def tweet_detail(tweet_id: int) -> dict[str, Any] | None:
    """The tweet object of a visible entry (a post of an active author, or a
    repost by an active user of one), or None."""
    if not ids.is_valid(tweet_id):
        return None
    visible = visible_entries(Tweet.objects.filter(id=tweet_id, author__is_active=True))
    if not visible.exists():
        return None
    found = tweet_objects([tweet_id])
    return found[0] if found else None


def author_of(tweet_id: int) -> int:
    """The author of an existing tweet (the actor of an entry)."""
    return Tweet.objects.filter(id=tweet_id).values_list("author_id", flat=True).get()


# --- tweet objects ----------------------------------------------------------------

#: The counts of a tweet nobody liked or reposted.
ZERO_COUNTS: dict[str, int] = {"likes": 0, "reposts": 0, "replies": 0}


def tweet_object(
    entry_id: int,
    author: str,
    text: str,
    *,
    original: tuple[int, str] | None = None,
    counts: dict[str, int] | None = None,
    in_reply_to: tuple[int, str] | None = None,
    mentions: Sequence[str] = (),
) -> dict[str, Any]:
    """A tweet as clients see it, wherever it appears (the API's pages, the
    database's timeline pages; the Redis read builds the same shape in Lua):
    ``{id, author, text, in_reply_to, mentions, created_at, repost_of,
    counts}`` (:func:`fanout.model.events.tweet_fields`, then ``repost_of``
    and ``counts``). For a repost, ``id``, ``author`` and ``created_at`` are
    the repost's; ``text``, ``in_reply_to`` and ``mentions`` are the
    original's, and ``original`` (its id and author) gives ``repost_of``;
    ``counts`` are the original's. The names in ``in_reply_to`` and
    ``mentions`` are as written (feed.conversations), not as they are now."""
    return {
        **events.tweet_fields(entry_id, author, text, in_reply_to=in_reply_to, mentions=mentions),
        "repost_of": None
        if original is None
        else {
            "id": original[0],
            "author": original[1],
            "created_at": events.created_at_iso(original[0]),
        },
        "counts": dict(counts or ZERO_COUNTS),
    }


def tweet_objects(entry_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The tweet objects of these entries, in their order (one query for the
    rows and their originals, one for the mentions, one Redis call for the
    counts); an entry gone meanwhile is left out. Visibility is the caller's."""
    if not entry_ids:
        return []
    rows = Tweet.objects.filter(id__in=list(entry_ids)).values_list(
        "id",
        "author__username",
        "text",
        "repost_of_id",
        "repost_of__author__username",
        "repost_of__text",
        # What the post (a repost: its original) answers: its id, and its
        # author's name as written.
        Coalesce("repost_of__in_reply_to", "in_reply_to"),
        Coalesce("repost_of__reply_to_name", "reply_to_name"),
    )
    by_id = {row[0]: row for row in rows}
    present = [by_id[i] for i in entry_ids if i in by_id]
    originals = list(dict.fromkeys(row[3] or row[0] for row in present))
    counts = tweet_counts(originals)
    mentions = _mention_names(originals)
    out = []
    for entry_id, author, text, original, original_author, original_text, *answered in present:
        shown = original or entry_id
        out.append(
            tweet_object(
                entry_id,
                author,
                text if original is None else original_text,
                original=None if original is None else (original, original_author),
                counts=counts.get(shown),
                in_reply_to=(answered[0], answered[1]) if answered[0] is not None else None,
                mentions=mentions.get(shown, ()),
            )
        )
    return out


def _mention_names(tweet_ids: Sequence[int]) -> dict[int, list[str]]:
    """The names of the users each of these tweets mentions, as written, in
    its text's order."""
    out: dict[int, list[str]] = {}
    rows = Mention.objects.filter(tweet_id__in=tweet_ids).order_by("id")
    for tweet_id, name in rows.values_list("tweet_id", "name"):
        out.setdefault(tweet_id, []).append(name)
    return out


def tweet_counts(tweet_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """The counts of these (original) tweets: from Redis, where the fanout job
    keeps them (``ct:`` keys, :func:`fanout.store.keys.counts`); from the
    database when Redis is unreachable (a COUNT per kind for the page's
    tweets, of live likes, reposts and direct replies by active users:
    :func:`_database_counts`)."""
    if not tweet_ids:
        return {}
    try:
        stored = _stored_counts(tweet_ids)
    except redis.RedisError:
        log.warning("counts: Redis unavailable, counting in the database", exc_info=True)
        return _database_counts(tweet_ids)
    out: dict[int, dict[str, int]] = {}
    for tweet_id, raw in zip(tweet_ids, stored, strict=True):
        counts = dict(ZERO_COUNTS)
        if raw:
            counts.update({k: int(v) for k, v in orjson.loads(raw).items() if k in counts})
        out[tweet_id] = counts
    return out


def _stored_counts(tweet_ids: Sequence[int]) -> list[bytes | None]:
    """The ``ct:`` values of these tweets (None: all zero)."""
    from fanout.store.timelines import store_for

    return store_for(settings.STARLING).counts(tweet_ids)


def _database_counts(tweet_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """The counts' view (docs/design.md) of these original tweets, by the
    database: their live likes, reposts and direct replies by active users
    (three indexed COUNTs, grouped by tweet)."""
    likes = dict(
        Like.objects.filter(tweet_id__in=tweet_ids, user__is_active=True)
        .values_list("tweet_id")
        .annotate(n=Count("id"))
        .values_list("tweet_id", "n")
    )
    reposts = dict(
        Tweet.objects.filter(repost_of_id__in=tweet_ids, author__is_active=True)
        .values_list("repost_of_id")
        .annotate(n=Count("id"))
        .values_list("repost_of_id", "n")
    )
    replies = dict(
        Tweet.objects.filter(in_reply_to__in=tweet_ids, author__is_active=True)
        .values_list("in_reply_to")
        .annotate(n=Count("id"))
        .values_list("in_reply_to", "n")
    )
    return {
        t: {"likes": likes.get(t, 0), "reposts": reposts.get(t, 0), "replies": replies.get(t, 0)}
        for t in tweet_ids
    }


def follow_page(
    user: User, *, direction: str, count: int, cursor: int | None = None
) -> tuple[list[tuple[int, User]], int | None]:
    """One page of ``followers`` or ``following``, newest follow first.

    Returns ``[(follow_id, other_user)]`` and the cursor of the next page
    (``None`` on the last page). The cursor is the follow row's id.
    """
    if direction == "followers":
        qs = Follow.objects.filter(followee=user, follower__is_active=True)
        qs = qs.select_related("follower")
    else:
        qs = Follow.objects.filter(follower=user, followee__is_active=True)
        qs = qs.select_related("followee")
    if cursor is not None:
        qs = qs.filter(id__lt=cursor)
    rows = list(qs.order_by("-id")[: count + 1])
    page = [(f.id, f.follower if direction == "followers" else f.followee) for f in rows[:count]]
    return page, (page[-1][0] if len(rows) > count else None)


def relation_page(
    model: type[Block] | type[Mute], user: User, *, count: int, cursor: int | None = None
) -> tuple[list[User], int | None]:
    """One page of the users ``user`` blocks (``Block``) or mutes (``Mute``),
    newest first, and the cursor of the next page (the row's id; ``None`` on
    the last page)."""
    if model is Block:
        blocks = Block.objects.filter(blocker=user).select_related("blocked")
        if cursor is not None:
            blocks = blocks.filter(id__lt=cursor)
        pairs = [(b.id, b.blocked) for b in blocks.order_by("-id")[: count + 1]]
    else:
        mutes = Mute.objects.filter(muter=user).select_related("muted")
        if cursor is not None:
            mutes = mutes.filter(id__lt=cursor)
        pairs = [(m.id, m.muted) for m in mutes.order_by("-id")[: count + 1]]
    return [u for _, u in pairs[:count]], (pairs[count - 1][0] if len(pairs) > count else None)


def list_page(
    owner: User, *, count: int, cursor: int | None = None
) -> tuple[list[ListRow], int | None]:
    """One page of ``owner``'s lists, newest first, and the cursor of the next
    page (a list's id; None on the last page)."""
    qs = ListRow.objects.filter(owner_id=owner.pk)
    if cursor is not None:
        qs = qs.filter(id__lt=cursor)
    rows = list(qs.order_by("-id")[: count + 1])
    page = rows[:count]
    return page, (page[-1].pk if len(rows) > count else None)


def member_page(
    found: ListRow, *, count: int, cursor: int | None = None
) -> tuple[list[User], int | None]:
    """One page of a list's (active) members, newest first, and the cursor of
    the next page (the membership's id; None on the last page)."""
    qs = ListMember.objects.filter(list_id=found.pk, member__is_active=True)
    if cursor is not None:
        qs = qs.filter(id__lt=cursor)
    rows = list(qs.select_related("member").order_by("-id")[: count + 1])
    page = rows[:count]
    return [m.member for m in page], (page[-1].id if len(rows) > count else None)


def following(reader: User | None, user: User) -> dict[str, bool] | None:
    """``{"reposts"}`` of the reader's follow of ``user``; ``None`` when not
    following (or anonymous)."""
    if reader is None:
        return None
    flag = Follow.objects.filter(follower=reader, followee=user).values_list("reposts", flat=True)
    found = flag.first()
    return None if found is None else {"reposts": bool(found)}


def blocks(blocker: int, blocked: int) -> bool:
    """Whether ``blocker`` blocks ``blocked``."""
    return Block.objects.filter(blocker_id=blocker, blocked_id=blocked).exists()


def mutes(muter: int, muted: int) -> bool:
    """Whether ``muter`` mutes ``muted``."""
    return Mute.objects.filter(muter_id=muter, muted_id=muted).exists()


def blocked_between(a: int, b: int) -> bool:
    """Whether a block stands between users ``a`` and ``b``, either way."""
    return Block.objects.filter(
        Q(blocker_id=a, blocked_id=b) | Q(blocker_id=b, blocked_id=a)
    ).exists()


def hidden_from(user_id: int) -> set[int]:
    """The users whose entries (and reposts of whose tweets) the view hides
    from ``user_id``: those the user blocks, who block the user, or whom the
    user mutes."""
    blocks = Block.objects.filter(Q(blocker_id=user_id) | Q(blocked_id=user_id))
    hidden = {b if a == user_id else a for a, b in blocks.values_list("blocker_id", "blocked_id")}
    return hidden | set(Mute.objects.filter(muter_id=user_id).values_list("muted_id", flat=True))


def home_timeline_oracle(user_ids: Sequence[int], cap: int) -> dict[int, list[int]]:
    """The view the timelines maintain, computed by the database with the ORM,
    independently of :func:`home_timeline_ids`: each user's newest ``cap``
    entries (of the user and their followees, active, of visible originals,
    leaving out what the user's blocks and mutes hide, the reposts of
    followees whose reposts the user turned off, and replies to users the
    user does not follow), per original only the greatest, newest first.
    What a rebuild verifies its sample against."""
    out: dict[int, list[int]] = {}
    for user_id in user_ids:
        hidden = hidden_from(user_id)
        followed = set(
            Follow.objects.filter(follower_id=user_id).values_list("followee_id", flat=True)
        )
        follows = Follow.objects.filter(follower_id=user_id).exclude(followee_id__in=hidden)
        no_reposts = follows.filter(reposts=False).values("followee_id")
        actors = Q(author_id=user_id) | Q(author_id__in=follows.values("followee_id"))
        rows = visible_entries(Tweet.objects.filter(actors, author__is_active=True)).exclude(
            Q(repost_of__isnull=False) & Q(author_id__in=no_reposts)
        )
        seen: set[int] = set()
        newest: list[int] = []
        # Newest first: the first entry of an original is its greatest.
        entries = rows.order_by("-id").values_list(
            "id",
            "author_id",
            "repost_of_id",
            "repost_of__author_id",
            "reply_to_id",
            "repost_of__reply_to_id",
        )
        for (
            entry,
            actor,
            original,
            original_author,
            answers,
            original_answers,
        ) in entries.iterator():
            to = original_answers if original else answers
            if actor != user_id and ((original_author or actor) in hidden or to in hidden):
                continue
            if (
                not original
                and to
                and to not in (actor, user_id)
                and actor != user_id
                and to not in followed
            ):
                continue  # a reply to someone the user does not follow
            key = original or entry
            if key in seen:
                continue
            seen.add(key)
            newest.append(entry)
            if len(newest) == cap:
                break
        out[user_id] = newest
    return out


def settled_since(user_ids: Sequence[int], seq: int) -> set[int]:
    """The users whose home timeline no write after outbox ``seq`` can have
    changed: they neither followed nor unfollowed (nor changed a follow's
    flags), their hidden users did not change (a block either way, a mute),
    and nobody they follow (nor they) tweeted or deleted since. Their timeline
    as of ``seq`` equals the database's current join."""
    recent = OutboxEvent.objects.filter(id__gt=seq)
    followers = {
        int(key.split(":", 1)[0])
        for key in recent.filter(topic=events.FOLLOWS).values_list("key", flat=True)
    }
    filtered = set(recent.filter(topic=events.FILTERS).values_list("join_key", flat=True))
    authors = set(recent.filter(topic=events.TWEETS).values_list("join_key", flat=True))
    settled = set()
    for user_id in user_ids:
        if user_id in followers or user_id in authors or user_id in filtered:
            continue
        if not Follow.objects.filter(follower_id=user_id, followee_id__in=authors).exists():
            settled.add(user_id)
    return settled


def idle_user_ids(cutoff: datetime, *, batch: int = 1000) -> Iterator[list[int]]:
    """Ids of the users not seen since ``cutoff``, a batch at a time (an index scan)."""
    ids = User.objects.filter(last_active__lt=cutoff).order_by().values_list("pk", flat=True)
    chunk: list[int] = []
    for user_id in ids.iterator(chunk_size=batch):
        chunk.append(user_id)
        if len(chunk) == batch:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def idle_batches(
    cutoff: datetime, *, batch: int = 1000
) -> Iterator[tuple[list[int], tuple[int, ...]]]:
    """:func:`idle_user_ids`' batches, each with the timeline owners (-L) of
    those users' lists, ascending: what the idle sweep drops with them."""
    for users in idle_user_ids(cutoff, batch=batch):
        lists = ListRow.objects.filter(owner_id__in=users).values_list("id", flat=True)
        yield users, tuple(sorted(owners.list_owner(L) for L in lists))
