"""The rebuild's read, and its join, in one task per partition.

The relay puts a tweet and a follow in the partition of their join key (the
author, the followee: :mod:`fanout.model.partitioning`), with the same partition
count on every topic. So partition ``p`` of ``tweets`` and partition ``p`` of
``follows`` hold every record of the same authors, and a task that reads
partition ``p`` of each topic has all it needs to compute those authors'
join state: the join runs where the records are read, with no shuffle.

A task of :class:`NewestRecordSource` reads partition ``p`` of each topic in
turn, keeps the newest record of each key (a tombstone removes the row, as
compaction would), decodes those (:func:`spark.rebuild.decode.decode_records`),
and puts the live tweets' bodies in the tweet cache. It then yields rows of
:data:`READ`: every author's state (the rule is
:func:`fanout.model.join.rebuilt_author_state`: a follow that mutes the author
is no follower, one with reposts off a *quiet* follower; each entry keeps
whom its original answers, each post whom it notifies) and the edges the
timelines are made from (a quiet follower's marked), the owners' filters
(their hidden users: the ``filters`` changelog is partitioned by owner too),
the posts each author's state says notify each user (their mentions
timelines': one row per author and user notified, so at most one per
notification), plus a handful of rows the driver reads for its figures:
counts, relay marks, bad records. Rows for every live tweet and follow would cost the JVM
more than their join does here.

The join is only right if the records are where the relay puts them, and
the task checks it: every live record's join key is hashed
(:func:`fanout.model.partitioning.partitions_of`), and a record in another
partition is reported (``MISPLACED``) and fails the rebuild, instead of
leaving a timeline short.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from fanout.config import StarlingConfig, TopicNames
from fanout.model import events
from fanout.model.engagements import Counts, Engagements
from fanout.model.join import newest_entries, rebuilt_author_state
from fanout.model.owners import MAX_USER
from fanout.model.partitioning import partitions_of
from fanout.store.timelines import store_for
from spark.rebuild.decode import FILTER, FOLLOWS, MUTED, QUIET, decode_records
from spark.runtime import arrow
from spark.runtime.worker_heap import collector_paused
from spark.source.datasource import KafkaBatchReader, KafkaChangelogSource, SourceOptions
from spark.source.kafka_io import Columns, consume_range
from spark.source.offsets import OffsetRange, Offsets, ranges

#: Records decoded (and handed to Spark) per Arrow batch of the read.
DECODE_CHUNK = 10_000
#: Rows per Arrow batch of what a read task yields.
OUT_CHUNK = 50_000
#: Bytes of Python memory a read task holds per record of the topic-partition
#: it is reading (measured: 941 MiB resident, 123 MiB of it the interpreter,
#: for a partition of 1,162,445 follows).
READ_BYTES_PER_RECORD = 740
#: Bad records a read task hands over (all are counted): the dead-letter
#: list's share of them.
BAD_KEPT = 10_000
#: Misplaced records a read task names (all are counted).
MISPLACED_NAMED = 10


class Row(enum.IntEnum):
    """What a row of :data:`READ` is (its ``kind``)."""

    #: An author's join state: ``a`` the author, ``blob`` the fanout job's
    #: state, ``kept`` the newest entries a follow of the author merges (or its
    #: list holds, if ``pulled``), ``origins`` their originals (a post's is
    #: itself), ``by`` their originals' authors (0 for a post, and where a
    #: record did not carry it), ``answers`` the users their originals answer
    #: (0: none, or the original's author), ``horizon`` theirs; ``posts``,
    #: ``posts_answers`` and ``posts_horizon``: the newest posts a quiet
    #: follower's follow merges, for a pushed author with reposts and quiet
    #: followers (else null: the same as ``kept``, or unused).
    STATE = 0
    #: A timeline's input: ``a`` the owner, ``b`` an author they follow, or
    #: themselves if they tweeted; ``quiet``: the owner follows the author
    #: with reposts off.
    EDGE = 1
    #: A relay mark: ``name`` the topic, ``a`` the partition, ``b`` its seq.
    MARK = 2
    #: A record set aside: ``name`` the topic, ``partition``, ``offset``,
    #: ``seq``, ``error``.
    BAD = 3
    #: A live record outside its join key's partition: ``name`` the topic,
    #: ``partition``, ``offset``, ``a`` the join key, ``b`` its partition.
    MISPLACED = 4
    #: A task's count of ``name`` (a kind of record, ``keys`` of every kind,
    #: ``authors``, ``kept`` ids, ``edges``, ``misplaced`` records) in ``a``;
    #: ``name`` ``seq``: the largest seq read, in ``a``.
    TALLY = 5
    #: A tweet's likes, reposts and replies: ``a`` the tweet, ``blob`` the
    #: fanout job's state of them (fanout.model.engagements).
    ENGAGEMENTS = 6
    #: An owner's filter: ``a`` the owner, ``hidden`` the users whose reposts
    #: its timeline leaves out (ascending; an empty filter has no row).
    FILTER = 7
    #: The posts of one author that notify one user (their mentions timeline,
    #: owner ``-a``, holds them): ``a`` the user, ``b`` the author, ``kept``
    #: the author's newest :func:`notified_runs` of them, ascending.
    MENTIONS = 8


#: The read's rows (``starling-changelog-newest``), by :class:`Row`.
READ = (
    "kind tinyint, a long, b long, blob binary, kept array<long>, origins array<long>, "
    "by array<long>, answers array<long>, horizon long, posts array<long>, "
    "posts_answers array<long>, posts_horizon long, pulled boolean, quiet boolean, "
    "hidden array<long>, name string, partition int, offset long, seq long, error string"
)


def largest_partition(ends: Offsets) -> tuple[str, int, int, float]:
    """(topic, partition, offsets, GiB its read task needs) of the largest
    partition up to ``ends``: what a read task of :class:`NewestRecordSource`
    must hold in memory at most (it reads one topic-partition at a time)."""
    topic, part, n = max(
        ((t, int(p), int(o)) for t, parts in ends.items() for p, o in parts.items()),
        key=lambda x: x[2],
        default=("", 0, 0),
    )
    return topic, part, n, n * READ_BYTES_PER_RECORD / 2**30


def notified_runs(notified: Mapping[int, Iterable[int]], keep: int) -> dict[int, list[int]]:
    """{user: the newest ``keep + 1`` of one author's posts that notify them,
    ascending} from the author's state's ``notified`` (post -> users: the
    join's rule, :func:`fanout.model.join.rebuilt_author_state`). A mentions
    timeline keeps the newest ``keep`` of its posts by authors its owner does
    not hide: the owner hides all of an author's posts or none, so each
    author's newest ``keep`` of them are enough, and one more says that
    older ones were cut (which sets its horizon)."""
    runs: dict[int, list[int]] = {}
    for post in sorted(notified):
        for user in notified[post]:
            runs.setdefault(user, []).append(post)
    return {user: posts[-(keep + 1) :] for user, posts in runs.items()}


def newest_per_key(
    chunks: Iterable[Columns],
) -> tuple[dict[bytes | None, tuple[Any, int, Any]], int]:
    """({key: (value, offset, headers)} of the newest record of each key, how
    many records were read) of one partition's records, read in offset order
    (a later record replaces an earlier one, as compaction would)."""
    found: dict[bytes | None, tuple[Any, int, Any]] = {}
    read = 0
    for keys, values, offsets, _, headers in chunks:
        found.update(zip(keys, zip(values, offsets, headers, strict=True), strict=True))
        read += len(offsets)
    return found, read


@dataclass(frozen=True)
class CoPartition(InputPartition):
    """One read task: partition ``partition`` of every topic (the ranges)."""

    partition: int
    ranges: tuple[OffsetRange, ...]

    @property
    def records(self) -> int:
        return sum(r.end - r.start for r in self.ranges)


def co_partitions(start: Offsets, end: Offsets) -> list[CoPartition]:
    """The ranges to read, one :class:`CoPartition` per partition number, the
    largest first (Spark starts tasks in this order: the long ones do not come
    last)."""
    by_partition: dict[int, list[OffsetRange]] = {}
    for r in ranges(start, end):
        by_partition.setdefault(r.partition, []).append(r)
    parts = [CoPartition(p, tuple(rs)) for p, rs in by_partition.items()]
    return sorted(parts, key=lambda c: (-c.records, c.partition))


@dataclass
class _Pairs:
    """Live records of one kind: (join key, other id, offset) columns, and a
    number of each for the kinds that have one (``extra``, a null as 0)."""

    keys: list[np.ndarray] = field(default_factory=list)
    others: list[np.ndarray] = field(default_factory=list)
    offsets: list[np.ndarray] = field(default_factory=list)
    extras: list[np.ndarray] = field(default_factory=list)

    def add(
        self,
        batch: pa.RecordBatch,
        live: pa.Array,
        key: str = "a",
        other: str = "b",
        extra: pa.Array | None = None,
    ) -> None:
        self.keys.append(pc.filter(batch.column(key), live).to_numpy())
        self.others.append(pc.filter(batch.column(other), live).to_numpy())
        self.offsets.append(pc.filter(batch.column("offset"), live).to_numpy())
        if extra is not None:
            self.extras.append(pc.filter(extra, live).cast(pa.int64()).fill_null(0).to_numpy())

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _whole(self.keys), _whole(self.others), _whole(self.offsets)

    def extra(self) -> np.ndarray:
        return _whole(self.extras)


def _whole(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


_NONE = np.empty(0, dtype=np.int64)


def _groups(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """(the distinct ``keys``, ascending; {key: its ``values``})."""
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    distinct, starts = np.unique(keys, return_index=True)
    ends = np.append(starts[1:], len(keys)) if len(keys) else starts
    return distinct, {
        int(k): values[a:b]
        for k, a, b in zip(distinct, starts.tolist(), ends.tolist(), strict=True)
    }


@dataclass
class PartitionJoin:
    """What a read task gathers from partition ``partition`` of each topic (rows
    of :data:`spark.rebuild.decode.DECODED`, :meth:`add`), and the rows of
    :data:`READ` it yields once it has them all (:meth:`rows`). ``partitions``:
    the relay's partition count, which placed the records."""

    partition: int
    partitions: int
    cap: int
    slack: int
    pull_threshold: int
    tweets: _Pairs = field(default_factory=_Pairs)  # (author, tweet id)
    #: (followee, follower, 1 if quiet) of the follows that make followers and
    #: edges: every follow but those that mute the followee (a self edge is one).
    follows: _Pairs = field(default_factory=_Pairs)
    muted: _Pairs = field(default_factory=_Pairs)  # (followee, follower) of the muting follows
    #: (original, repost id, the original's author) of the tweets.
    reposts: _Pairs = field(default_factory=_Pairs)
    #: (tweet id, the user its original answers) of the replies and their reposts.
    answers: _Pairs = field(default_factory=_Pairs)
    mentions: dict[int, list[int]] = field(default_factory=dict)  # post -> the users it mentions
    filters: _Pairs = field(default_factory=_Pairs)  # (owner, owner) of the filters
    hidden: dict[int, list[int]] = field(default_factory=dict)  # owner -> hidden users
    likers: _Pairs = field(default_factory=_Pairs)  # (tweet, user) of the engagements
    reposters: _Pairs = field(default_factory=_Pairs)  # (tweet, user) of the engagements
    replies: _Pairs = field(default_factory=_Pairs)  # (tweet, reply) of the engagements
    tally: Counter[str] = field(default_factory=Counter)
    other: list[dict[str, Any]] = field(default_factory=list)  # marks, bad records
    seq: int = 0
    bad_kept: int = 0
    #: The engaged tweets' (likes, reposts, replies), once :meth:`rows` has read them.
    counts: dict[int, Counts] = field(default_factory=dict)

    def add(self, batch: pa.RecordBatch) -> None:
        """Take in a chunk of one topic's decoded records."""
        kind = batch.column("kind")
        self.tally["keys"] += batch.num_rows
        for count in pc.value_counts(kind).to_pylist():
            self.tally[count["values"]] += count["counts"]
        self.seq = max(self.seq, pc.max(batch.column("seq")).as_py() or 0)
        tweets = pc.equal(kind, "tweet").fill_null(False)
        self.tweets.add(batch, tweets)
        self.reposts.add(
            batch,
            pc.and_(tweets, batch.column("c").is_valid()),
            key="c",
            other="b",
            extra=batch.column("d"),
        )
        answered = batch.column("e")
        if answered.null_count < batch.num_rows:
            self.answers.add(batch, pc.and_(tweets, answered.is_valid()), key="b", other="e")
        mentioning = pc.and_(tweets, batch.column("ids").is_valid())
        if pc.any(mentioning).as_py():  # a chunk of posts may name users and answer none
            for row in batch.filter(mentioning).select(["b", "ids"]).to_pylist():
                self.mentions[row["b"]] = row["ids"]
        # A follow of oneself is the self edge, whatever its flags (fanout.model.join).
        own = pc.equal(batch.column("a"), batch.column("b")).fill_null(False)
        muted = pc.equal(kind, MUTED).fill_null(False)
        follows = pc.is_in(kind, pa.array(FOLLOWS)).fill_null(False)
        quiet = pc.and_(pc.equal(kind, QUIET).fill_null(False), pc.invert(own))
        self.follows.add(batch, pc.and_(follows, pc.or_(pc.invert(muted), own)), extra=quiet)
        self.muted.add(batch, pc.and_(muted, pc.invert(own)))
        filters = pc.equal(kind, FILTER).fill_null(False)
        self.filters.add(batch, filters, other="a")
        if pc.any(filters).as_py():
            for row in batch.filter(filters).select(["a", "ids"]).to_pylist():
                if row["ids"]:
                    self.hidden[row["a"]] = row["ids"]
        self.likers.add(batch, pc.equal(kind, events.LIKE).fill_null(False))
        self.reposters.add(batch, pc.equal(kind, events.REPOST).fill_null(False))
        self.replies.add(batch, pc.equal(kind, events.REPLY).fill_null(False))
        for row in batch.filter(pc.is_in(kind, pa.array(["mark", "bad"]))).to_pylist():
            if row["kind"] == "mark":
                self.other.append(
                    {"kind": Row.MARK, "name": row["topic"], "a": row["a"], "b": row["b"]}
                )
            elif self.bad_kept < BAD_KEPT:
                self.other.append({"kind": Row.BAD, **_named(row)})
                self.bad_kept += 1

    def rows(self, topics: TopicNames) -> Iterator[pa.RecordBatch]:
        authors, tweet_ids, tweet_offsets = self.tweets.arrays()
        followees, followers, follow_offsets = self.follows.arrays()
        quiet = self.follows.extra().astype(bool)
        originals, reposts, _ = self.reposts.arrays()
        original_authors = self.reposts.extra()
        replies, answered, _ = self.answers.arrays()
        muting, muters, muted_offsets = self.muted.arrays()
        owners_filtered, _, filter_offsets = self.filters.arrays()
        # A filter's join key is its owner's user: a list's copy (-L) goes
        # with its owner o (fanout.model.owners.user_of).
        owners_filtered = np.where(
            owners_filtered < 0, -owners_filtered & MAX_USER, owners_filtered
        )
        self.tweets = self.follows = self.reposts = self.muted = self.answers = _Pairs()
        tweeted, tweets = _groups(authors, tweet_ids)
        _, audiences = _groups(followees, followers)
        _, quiet_followers = _groups(followees[quiet], followers[quiet])
        yield from self._misplaced(topics.tweets, authors, tweet_offsets, tweeted)
        every_followee = np.concatenate((followees, muting))
        yield from self._misplaced(
            topics.follows,
            every_followee,
            np.concatenate((follow_offsets, muted_offsets)),
            np.unique(every_followee),
        )
        yield from self._misplaced(
            topics.filters, owners_filtered, filter_offsets, np.unique(owners_filtered)
        )
        yield from self._engagements(topics)
        # A list's member its owner hides (a muted membership) is still a member:
        # in the list's followees (the replies' rule), none of its entries. It
        # travels as a row of mentions with none (a list has no mentions timeline).
        hidden_members = muters < -MAX_USER
        if hidden_members.any():
            n = int(hidden_members.sum())
            yield _of_kind(
                Row.MENTIONS,
                {"a": muters[hidden_members], "b": muting[hidden_members], "kept": [[]] * n},
            )
        repost_ids = reposts.tolist()
        yield from self._states(
            tweets,
            audiences,
            quiet_followers,
            dict(zip(repost_ids, originals.tolist(), strict=True)),
            dict(zip(repost_ids, original_authors.tolist(), strict=True)),
            dict(zip(replies.tolist(), answered.tolist(), strict=True)),
        )
        self.mentions = {}
        # Each author who tweeted has their own tweets in their timeline.
        owners, followed = (
            np.concatenate((followers, tweeted)),
            np.concatenate((followees, tweeted)),
        )
        marked = np.concatenate((quiet, np.zeros(len(tweeted), dtype=bool)))
        for at in range(0, len(owners), OUT_CHUNK):
            yield _batch(
                {
                    "kind": np.full(min(OUT_CHUNK, len(owners) - at), Row.EDGE, np.int8),
                    "a": owners[at : at + OUT_CHUNK],
                    "b": followed[at : at + OUT_CHUNK],
                    "quiet": marked[at : at + OUT_CHUNK],
                }
            )
        self.tally["edges"] = len(owners)
        yield from self._filters()
        if self.other:
            yield _rows(self.other)
        tallies = [{"kind": Row.TALLY, "name": k, "a": n} for k, n in self.tally.items()]
        yield _rows([*tallies, {"kind": Row.TALLY, "name": "seq", "a": self.seq}])

    def _filters(self) -> Iterator[pa.RecordBatch]:
        """The owners' non-empty filters (rows of ``FILTER``)."""
        owners = sorted(self.hidden)
        for at in range(0, len(owners), OUT_CHUNK):
            some = owners[at : at + OUT_CHUNK]
            yield _batch(
                {
                    "kind": np.full(len(some), Row.FILTER, np.int8),
                    "a": some,
                    "hidden": [self.hidden[o] for o in some],
                }
            )
        self.hidden = {}

    def _misplaced(
        self, topic: str, keys: np.ndarray, offsets: np.ndarray, distinct: np.ndarray
    ) -> Iterator[pa.RecordBatch]:
        """The records of ``topic`` whose join key (``keys``, of which
        ``distinct`` are the distinct ones) is not in this partition."""
        homes = partitions_of(distinct, self.partitions)
        strays = distinct[homes != self.partition]
        if not len(strays):
            return
        home = dict(zip(strays.tolist(), homes[homes != self.partition].tolist(), strict=True))
        wrong = np.flatnonzero(np.isin(keys, strays))
        self.tally["misplaced"] += len(wrong)
        yield _rows(
            [
                {
                    "kind": Row.MISPLACED,
                    "name": topic,
                    "partition": self.partition,
                    "offset": int(offsets[i]),
                    "a": int(keys[i]),
                    "b": home[int(keys[i])],
                }
                for i in wrong[:MISPLACED_NAMED]
            ]
        )

    def _engagements(self, topics: TopicNames) -> Iterator[pa.RecordBatch]:
        """Every liked, reposted or answered tweet's engagements (rows of
        ``ENGAGEMENTS``), and their counts in ``self.counts``."""
        liked, likers, like_offsets = self.likers.arrays()
        shared, reposters, repost_offsets = self.reposters.arrays()
        answered, replies, reply_offsets = self.replies.arrays()
        self.likers = self.reposters = self.replies = _Pairs()
        tweets = np.concatenate((liked, shared, answered))
        offsets = np.concatenate((like_offsets, repost_offsets, reply_offsets))
        yield from self._misplaced(topics.engagements, tweets, offsets, np.unique(tweets))
        like_sets, repost_sets = _groups(liked, likers)[1], _groups(shared, reposters)[1]
        reply_sets = _groups(answered, replies)[1]
        out: dict[str, list[Any]] = {"a": [], "blob": []}
        for tweet in sorted(like_sets.keys() | repost_sets.keys() | reply_sets.keys()):
            state = Engagements(
                np.unique(like_sets.get(tweet, _NONE)),
                np.unique(repost_sets.get(tweet, _NONE)),
                np.unique(reply_sets.get(tweet, _NONE)),
            )
            self.counts[tweet] = state.counts
            out["a"].append(tweet)
            out["blob"].append(state.encode())
            if len(out["a"]) == OUT_CHUNK:
                yield _batch({"kind": np.full(OUT_CHUNK, Row.ENGAGEMENTS, np.int8), **out})
                out = {k: [] for k in out}
        if self.counts:
            self.tally["engaged"] = len(self.counts)
        if out["a"]:
            yield _batch({"kind": np.full(len(out["a"]), Row.ENGAGEMENTS, np.int8), **out})

    def _states(
        self,
        tweets: Mapping[int, np.ndarray],
        followers: Mapping[int, np.ndarray],
        quiet: Mapping[int, np.ndarray],
        originals: Mapping[int, int],
        original_authors: Mapping[int, int],
        answers: Mapping[int, int],
    ) -> Iterator[pa.RecordBatch]:
        """Every author's state (one with tweets or followers), in batches;
        ``quiet``: the followers with reposts off; ``originals`` and
        ``original_authors``: each repost's original and its author;
        ``answers``: the user each entry's original answers (replies and
        their reposts); the posts' mentions are :attr:`mentions`. Then the
        posts that notify each user, per author (rows of ``MENTIONS``)."""
        keep = self.cap + self.slack
        names = (
            "a", "blob", "kept", "origins", "by", "answers", "horizon", "posts", "posts_answers",
            "posts_horizon",
        )  # fmt: skip
        out: dict[str, list[Any]] = {k: [] for k in (*names, "pulled")}
        notified: dict[str, list[Any]] = {"a": [], "b": [], "kept": []}
        for author in sorted(tweets.keys() | followers.keys()):
            entries = tweets[author].tolist() if author in tweets else []
            reposted = [e for e in entries if e in originals] if originals else []
            replied = [e for e in entries if e in answers] if answers else []
            mentioning = [e for e in entries if e in self.mentions] if self.mentions else []
            state = rebuilt_author_state(
                author,
                followers[author].tolist() if author in followers else (),
                entries,
                pull_threshold=self.pull_threshold,
                originals={e: originals[e] for e in reposted} or None,
                original_authors={e: original_authors[e] for e in reposted} or None,
                quiet=quiet[author].tolist() if author in quiet else (),
                answers={e: answers[e] for e in replied} or None,
                mentions={e: self.mentions[e] for e in mentioning} or None,
            )
            # What a follow merges, and of a quiet follower the newest posts:
            kept, horizon, triples = newest_entries(
                state.tweets, state.originals, keep, state.original_authors
            )
            posts, posts_horizon, posts_answers = None, None, None
            if state.originals and state.quiet and not state.pulled:
                posts_only = [t for t in state.tweets if t not in state.originals]
                posts, posts_horizon, _ = newest_entries(posts_only, {}, keep)
                posts_answers = [state.answers.get(e, 0) for e in posts]
            by = {e: b for e, _, b in triples}
            out["a"].append(author)
            out["blob"].append(state.encode())
            out["kept"].append(kept)
            out["origins"].append([state.originals.get(e, e) for e in kept])
            out["by"].append([by.get(e, 0) for e in kept])
            out["answers"].append([state.answers.get(e, 0) for e in kept])
            out["horizon"].append(horizon)
            out["posts"].append(posts)
            out["posts_answers"].append(posts_answers)
            out["posts_horizon"].append(posts_horizon)
            out["pulled"].append(state.pulled)
            self.tally["authors"] += 1
            self.tally["kept"] += len(kept) + len(posts or ())
            if len(out["a"]) == OUT_CHUNK:
                yield _batch({"kind": np.full(OUT_CHUNK, Row.STATE, np.int8), **out})
                out = {k: [] for k in out}
            if state.notified:
                self.tally["notified"] += sum(len(u) for u in state.notified.values())
                for user, run in notified_runs(state.notified, keep).items():
                    notified["a"].append(user)
                    notified["b"].append(author)
                    notified["kept"].append(run)
                if len(notified["a"]) >= OUT_CHUNK:
                    yield _of_kind(Row.MENTIONS, notified)
                    notified = {k: [] for k in notified}
        if out["a"]:
            yield _batch({"kind": np.full(len(out["a"]), Row.STATE, np.int8), **out})
        if notified["a"]:
            yield _of_kind(Row.MENTIONS, notified)


def _named(row: Mapping[str, Any]) -> dict[str, Any]:
    """A bad record's row of :data:`READ` from its decoded row."""
    return {
        "name": row["topic"],
        "partition": row["partition"],
        "offset": row["offset"],
        "seq": row["seq"],
        "error": row["error"],
    }


_SCHEMA = arrow.schema(READ)


def _batch(columns: Mapping[str, Any]) -> pa.RecordBatch:
    """A batch of :data:`READ` from some of its columns (the others null)."""
    n = len(next(iter(columns.values())))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type)
            for f in _SCHEMA
        ],
        schema=_SCHEMA,
    )


def _of_kind(kind: Row, columns: Mapping[str, Any]) -> pa.RecordBatch:
    """A batch of :data:`READ` rows of one ``kind`` from some of its columns."""
    n = len(next(iter(columns.values())))
    return _batch({"kind": np.full(n, kind, np.int8), **columns})


def _rows(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """A batch of :data:`READ` from rows given as dicts (a missing column: null)."""
    return pa.RecordBatch.from_pylist([{**r, "kind": int(r["kind"])} for r in rows], schema=_SCHEMA)


def _required(raw: Mapping[str, str], name: str) -> int:
    """A number the join needs from the source's options (no default: a wrong
    one would rebuild wrong timelines)."""
    if name not in raw:
        raise ValueError(f"starling-changelog-newest needs the option {name!r}")
    return int(raw[name])


class NewestRecordReader(KafkaBatchReader):
    """One task per partition number (:class:`CoPartition`): partition ``p`` of
    every topic, one topic after the other, then its authors' join."""

    def __init__(self, options: SourceOptions, raw: Mapping[str, str], topics: TopicNames) -> None:
        super().__init__(options, raw)
        self.topics = topics
        self.redis_url = raw.get("redisUrl")
        self.store_config = StarlingConfig(
            redis_url=self.redis_url or "",
            redis_cluster_urls=tuple(u for u in raw.get("redisClusterUrls", "").split(",") if u),
            redis_shards=int(raw.get("redisShards", "1")),
        )
        self.write_bodies = raw.get("writeBodies", "false").lower() == "true"
        self.partition_count, self.cap, self.slack, self.pull_threshold = (
            _required(raw, name)
            for name in ("partitions", "timelineSize", "timelineSlack", "pullThreshold")
        )

    def partitions(self) -> list[CoPartition]:  # type: ignore[override]
        return co_partitions(self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, CoPartition)
        with collector_paused():  # a million records held, no cycles among them
            yield from self._read(partition)

    def _read(self, partition: CoPartition) -> Iterator[pa.RecordBatch]:
        join = PartitionJoin(
            partition.partition, self.partition_count, self.cap, self.slack, self.pull_threshold
        )
        store = store_for(self.store_config, timeout=120) if self.redis_url else None
        for part in partition.ranges:
            newest, read = newest_per_key(
                consume_range(self.options.client, part, self.options.read_timeout)
            )
            if store is not None:
                store.count_records_read(read - len(newest))  # a key's older records: done
            order = list(newest)
            for at in range(0, len(order), DECODE_CHUNK):
                some = order[at : at + DECODE_CHUNK]
                values, offsets, headers = zip(*(newest.pop(k) for k in some), strict=True)
                rows, bodies = decode_records(
                    part, some, list(values), list(offsets), list(headers), topics=self.topics
                )
                join.add(rows)
                if store is not None:
                    if self.write_bodies:
                        store.write_bodies(bodies)
                    store.count_records_read(len(some))
        yield from join.rows(self.topics)
        if store is not None and self.write_bodies:
            store.write_counts(join.counts)


class NewestRecordSource(KafkaChangelogSource):
    """``starling-changelog-newest``: the changelogs read as tables and joined,
    as a batch (rows of :data:`READ`). Takes the Kafka source's options plus
    ``topicPrefix`` (the deployment's topic names), ``partitions`` (the relay's
    partition count), ``timelineSize``, ``timelineSlack`` and ``pullThreshold``
    (the join's settings), ``redisUrl`` (where the tasks count the records
    they are done with, as they go: a task reads whole partitions, so
    finished tasks alone would say little) and ``writeBodies`` (``true``: the
    tasks put the live tweets' bodies in the tweet cache there, the same
    bytes the fanout job writes, so that the bodies never travel through
    Spark).

    A task holds the newest records of one topic-partition in memory until it
    has read them all (:data:`READ_BYTES_PER_RECORD`; the rebuild's snapshot
    stage names the largest partition and what it needs), and its authors'
    tweets and followers as NumPy arrays until it has joined them."""

    @classmethod
    def name(cls) -> str:
        return "starling-changelog-newest"

    def schema(self) -> str:
        return READ

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        raise NotImplementedError(
            "starling-changelog-newest is read as a batch (the rebuild's read); the "
            "fanout job streams from starling-kafka"
        )

    def reader(self, schema: Any) -> DataSourceReader:
        topics = TopicNames(self.options.get("topicPrefix", ""))
        return NewestRecordReader(SourceOptions.parse(self.options), self.options, topics)
