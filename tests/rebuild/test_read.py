"""The rebuild's read: the newest record of each key, decoded in the read tasks,
on the real broker and Spark."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from fanout.config import StarlingConfig
from fanout.model import events, owners
from fanout.model.partitioning import partition_for
from fanout.store import keys
from fanout.store.ops import pack_ids, pack_timeline, unpack_timeline
from fanout.store.timelines import TimelineStore, store_for
from spark.rebuild.join import BROADCAST_KEPT_IDS
from spark.rebuild.read import Row
from spark.rebuild.report import Progress
from spark.rebuild.stages import Rebuild, RebuildFailed
from spark.stream.changelog import header_column
from tests.conftest import make_config
from tests.support.spark_helpers import ChangelogWriter

pytestmark = pytest.mark.spark


def quiet_rebuild(
    spark: SparkSession,
    config: StarlingConfig,
    store: TimelineStore,
    tmp_path: Path,
    *,
    broadcast_ids: int = BROADCAST_KEPT_IDS,
) -> Rebuild:
    """A rebuild whose progress lines go nowhere."""
    progress = Progress(store, out=io.StringIO())
    return Rebuild(spark, config, store, progress, tmp_path, broadcast_ids=broadcast_ids)


VALUES = [
    b"42", b" 7 ", b"+5", b"-3", b"007", b"\t8\n", b"9223372036854775807",
    b"9223372036854775808", b"-9223372036854775808", b"", b"4x", b"1_000", b"0x10", b"1e3",
    b"\xff1", b"\xd9\xa3",
]  # fmt: skip


def test_python_reads_header_numbers_as_the_streaming_job_does_in_sql(spark) -> None:
    """The job parses headers in SQL (spark.stream.changelog), the rebuild in Python
    (events.header_numbers): a record must carry the same numbers in both."""
    rows = [[("seq", v), ("jk", b"9"), ("mark", v), ("seq", b"1")] for v in VALUES]
    rows += [[("jk", v)] for v in VALUES] + [[]]
    df = spark.createDataFrame(
        [(i, h) for i, h in enumerate(rows)],
        "i int, headers array<struct<key: string, value: binary>>",
    )
    sql = df.select(
        "i",
        header_column(events.HEADER_SEQ).alias("seq"),
        header_column(events.HEADER_JOIN_KEY).alias("jk"),
        header_column(events.HEADER_MARK).alias("mark"),
    ).collect()
    for row in sql:
        assert (row.seq, row.jk, row.mark) == events.header_numbers(rows[row.i]), rows[row.i]


def test_the_newest_record_of_each_key_decoded_and_the_bad_ones_set_aside(
    spark, kafka_bootstrap: str, redis_url: str, redis_client, tmp_path: Path
) -> None:
    config: StarlingConfig = make_config(kafka_bootstrap, redis_url, partitions=2)
    writer = ChangelogWriter(config)
    writer.send(
        [
            events.TweetPosted(1001, 1, "ann", "first"),
            events.TweetPosted(1002, 2, "bob", "second"),
            events.Followed(3, 1),
            events.Followed(4, 1),
        ]
    )
    last = writer.send([events.TweetDeleted(1001, 1), events.Unfollowed(4, 1)])
    writer.raw(config.topics.tweets, b"1003", b"not json", events.headers(last + 1, 7))
    writer.send([events.Followed(4, 2)])
    store = store_for(config)
    rebuild = quiet_rebuild(spark, config, store, tmp_path)
    decoded = rebuild.read(rebuild.snapshot())

    rows = decoded.collect()
    # Joined in the read tasks: the live tweet's and follows' authors' states,
    # and the timelines' edges (each follow, and the tweeting author's own).
    assert {r.a for r in rows if r.kind == Row.STATE} == {1, 2}
    assert {(r.a, r.b) for r in rows if r.kind == Row.EDGE} == {(3, 1), (4, 2), (2, 2)}
    # The read tasks put the live tweet's body in the cache, and only it.
    bodies = {k: redis_client.get(k) for k in redis_client.scan_iter(f"{keys.TWEET_PREFIX}*")}
    assert bodies == {
        keys.tweet(1002).encode(): events.tweet_json(events.TweetPosted(1002, 2, "bob", "second"))
    }
    gone = sum(r.a for r in rows if r.kind == Row.TALLY and r.name == "gone")
    assert gone == 2  # tweet 1001, follow 4 -> 1
    assert {r.a for r in rows if r.kind == Row.MARK} == {0, 1}  # a mark per tweets partition
    summary = rebuild.summary
    assert (summary.tweets, summary.follows, summary.bad_records) == (1, 2, 1)
    assert store.records_read() == summary.records  # what the read tasks counted
    assert summary.snapshot_seq == writer.last_seq
    (dead,) = store.dead_letters()
    assert dead["topic"] == config.topics.tweets and dead["by"] == "rebuild"
    assert "JSON" in dead["error"]


def test_a_record_outside_its_join_keys_partition_fails_the_read(
    spark, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    """The read joins each partition on its own: a live record the relay's
    partitioner would not have put there (the topics written with another
    partition count) would leave its author's followers short."""
    config: StarlingConfig = make_config(kafka_bootstrap, redis_url, partitions=2)
    writer = ChangelogWriter(config)
    last = writer.send([events.TweetPosted(1001, 1, "ann", "first"), events.Followed(2, 1)])
    home = partition_for(1, 2)
    tweet = events.encode(events.TweetPosted(1002, 1, "ann", "second"))
    writer.raw(config.topics.tweets, tweet.key, tweet.value, events.headers(last + 1, 1), 1 - home)
    store = store_for(config)
    rebuild = quiet_rebuild(spark, config, store, tmp_path)
    with pytest.raises(RebuildFailed, match="found 1 live records outside the partition") as failed:
        rebuild.read(rebuild.snapshot())
    assert f"{config.topics.tweets}/{1 - home} offset" in str(failed.value)
    assert "STARLING_PARTITIONS=2" in str(failed.value)


def test_verify_refuses_a_timeline_whose_length_in_redis_is_not_the_computed_one(
    spark, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    config: StarlingConfig = make_config(kafka_bootstrap, redis_url)
    store = store_for(config)
    generation = store.new_generation(state="building")
    store.write_timelines(generation, [(1, pack_timeline(0, [5, 6])), (2, pack_timeline(0, []))])
    store.write_dropped(generation, [3])
    rebuild = quiet_rebuild(spark, config, store, tmp_path)
    rebuild.verify(generation, {1: 2, 2: 0, 3: -1})  # as computed: passes
    assert rebuild.summary.verified_counts == 3
    for lengths in ({1: 3, 2: 0, 3: -1}, {1: 2, 2: 0, 3: 0}, {1: 2, 2: 0, 3: -1, 4: 0}):
        with pytest.raises(RebuildFailed, match="do not have the computed length"):
            rebuild.verify(generation, lengths)


def test_kept_ids_broadcast_or_joined_in_spark_write_the_same_timelines(
    spark, kafka_bootstrap: str, redis_url: str, redis_client, tmp_path: Path
) -> None:
    """Below ``broadcast_ids`` the write tasks join the edges with every author's
    kept tweets themselves; above it Spark does: the same timelines, lengths,
    pulled lists and pulls either way."""
    config: StarlingConfig = make_config(
        kafka_bootstrap, redis_url, partitions=2, timeline_size=3, timeline_slack=1,
        pull_threshold=3,
    )  # fmt: skip
    writer = ChangelogWriter(config)
    network = [events.Followed(u, u) for u in range(1, 7)]
    network += [events.Followed(f, 1) for f in (2, 3, 4, 5)]  # 1 is pulled (> 3 followers)
    network += [events.Followed(2, 3), events.Followed(4, 3), events.Followed(5, 2)]
    tweets = [events.TweetPosted(100 + i, 1 + i % 4, "u", f"t{i}") for i in range(24)]
    writer.send(network + tweets + [events.TweetDeleted(101, 2), events.Unfollowed(5, 2)])
    store = store_for(config)
    written = {}
    for broadcast_ids in (10**6, 0):
        rebuild = quiet_rebuild(spark, config, store, tmp_path, broadcast_ids=broadcast_ids)
        states, inputs = rebuild.join(rebuild.read(rebuild.snapshot()))
        assert (inputs.kept is not None) == (broadcast_ids > 0)
        generation = store.new_generation(state="building")
        lengths = rebuild.write(generation, states, inputs)
        timelines = store.timelines(generation, [u for u in sorted(lengths) if u > 0])
        pulls = {u: redis_client.smembers(keys.pulls(generation, u)) for u in lengths}
        lists = redis_client.get(keys.author_list(generation, 1))
        written[broadcast_ids] = (lengths, [t.ids if t else None for t in timelines], pulls, lists)
    assert written[10**6] == written[0]
    lengths, timelines, pulls, lists = written[0]
    assert sorted(lengths) == [-6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6]  # and their mentions
    assert lengths[3] == 3 + 1  # cap + slack
    assert timelines[1] == [122, 121, 120]  # 2's view: 3's, its own and the pulled 1's newest
    assert pulls[2] == {b"1"} and pulls[6] == set() and lists is not None


def test_mutes_quiet_follows_and_filters_written_alike_either_way_and_read_as_computed(
    spark, kafka_bootstrap: str, redis_url: str, redis_client, tmp_path: Path
) -> None:
    """Blocks, mutes and the reposts flag: the same timelines, filters, pulls
    (quiet ones marked) and refills whether the write tasks join the kept
    ids themselves or Spark does; and what readers see of the written
    generation (merged.lua, which screens the pulled lists) is what the dry
    run computes for them: a comparison with it finds no difference."""
    config: StarlingConfig = make_config(
        kafka_bootstrap, redis_url, partitions=2, timeline_size=3, timeline_slack=1,
        pull_threshold=3,
    )  # fmt: skip
    writer = ChangelogWriter(config)
    network = [events.Followed(u, u) for u in range(1, 9)]
    network += [events.Followed(f, 1) for f in (3, 4, 5)]  # 1 is pulled
    network += [events.Followed(2, 1, reposts=False)]  # 2 reads 1's list without its reposts
    network += [events.Followed(8, 7), events.Followed(4, 7, reposts=False)]
    network += [events.Followed(3, 7, muted=True), events.Followed(6, 7, muted=True)]
    network += [events.FiltersSet(8, (6,)), events.FiltersSet(5, (6,)), events.FiltersSet(2, ())]
    tweets = [events.TweetPosted(100 + i, 6, "six", f"p{i}") for i in range(6)]
    tweets += [events.TweetPosted(110 + i, 7, "seven", f"q{i}") for i in range(2)]
    tweets += [events.TweetPosted(120 + i, 7, "seven", "", 100 + i, 6) for i in range(6)]
    tweets += [events.TweetPosted(130 + i, 1, "one", "", 100 + i, 6) for i in range(3)]
    tweets += [events.TweetPosted(140, 1, "one", "hi")]
    writer.send(network + tweets)
    store = store_for(config)
    written = {}
    for broadcast_ids in (10**6, 0):
        rebuild = quiet_rebuild(spark, config, store, tmp_path, broadcast_ids=broadcast_ids)
        decoded = rebuild.read(rebuild.snapshot())
        states, inputs = rebuild.join(decoded)
        generation = store.new_generation(state="building")
        lengths = rebuild.write(generation, states, inputs)
        users = [u for u in sorted(lengths) if u > 0]
        views = store.timelines(generation, users)
        written[broadcast_ids] = (
            lengths,
            {u: unpack_timeline(redis_client.get(keys.timeline(generation, u))) for u in users},
            {u: (v.horizon, v.ids) if v else None for u, v in zip(users, views, strict=True)},
            {u: redis_client.smembers(keys.pulls(generation, u)) for u in users},
            {u: redis_client.get(keys.filters(generation, u)) for u in users},
            sorted(store.take_refills(100)),
            rebuild.summary.short,
            store.screened(generation, users),
        )
    assert written[10**6] == written[0]
    lengths, timelines, views, pulls, filters, refills, short, screened = written[0]
    # 8 hides 6: 7's newest entries, its reposts of 6's posts, leave nothing
    # above 7's horizon: short, and queued for a refill.
    assert timelines[8] == (122, []) and refills == [8] and short == 1
    assert timelines[7] == (122, [122, 123, 124, 125])  # its own reposts are never hidden
    assert timelines[4] == (0, [110, 111])  # 7 with reposts off: its posts
    assert timelines[3] == (0, [])  # 3 mutes 7, and reads 1's list
    # Readers: 1's list merged in, without the reposts they hide (5 hides 6)
    # or, followed with reposts off (2), without any.
    assert views[4] == (0, [140, 132, 131]) and views[3] == (0, [140, 132, 131])
    assert views[5] == (0, [140]) and views[2] == (0, [140])
    assert pulls[2] == {b"-1"} and pulls[3] == pulls[5] == {b"1"}
    assert filters[8] == filters[5] == pack_ids([6]) and filters[2] is None
    assert screened == {2, 5, 8}
    assert rebuild.summary.filters == 3 and rebuild.summary.follows == 8 + 6 + 2

    # The dry run's comparison with the generation just written, as live.
    store.switch(generation, store.active_generation())
    rebuild.diff(states, inputs)
    assert rebuild.summary.timelines == len([u for u in lengths if u > 0])
    assert rebuild.summary.differing == 0 and rebuild.summary.live_missing == 0
    decoded.unpersist()


def test_replies_written_alike_either_way_and_read_as_computed(
    spark, kafka_bootstrap: str, redis_url: str, redis_client, tmp_path: Path
) -> None:
    """docs/decisions.md D29: the replies of followees to users their readers
    do not follow are kept aside (``ta:``) and counted by the cap, those that
    show recorded (``tc:``), every owner's followees written (``tf:``) and a
    pulled author's replies indexed beside its list (``ac:``), the same
    whether the write tasks join the kept ids themselves or Spark does; what
    readers see of the written generation (merged.lua, which screens the
    lists' replies with the reader's followees) is what the dry run computes."""
    config: StarlingConfig = make_config(
        kafka_bootstrap, redis_url, partitions=2, timeline_size=3, timeline_slack=1,
        pull_threshold=4,
    )  # fmt: skip
    writer = ChangelogWriter(config)
    network = [events.Followed(u, u) for u in range(1, 9)]
    network += [events.Followed(f, 1) for f in (3, 4, 5, 6)]  # 1 is pulled, 7 is not
    network += [events.Followed(2, u) for u in (6, 7, 8)]
    network += [events.Followed(3, 7), events.Followed(6, 7), events.FiltersSet(6, (5,))]

    def reply(t: int, author: int, parent: int, to: int) -> events.TweetPosted:
        return events.TweetPosted(
            t, author, f"u{author}", "re", in_reply_to=parent, reply_to=to, reply_to_name="x"
        )

    tweets = [events.TweetPosted(100 + u - 5, u, f"u{u}", "hi") for u in (5, 6, 7)]  # 100-102
    tweets[2] = events.TweetPosted(102, 2, "u2", "hi")
    tweets += [reply(110, 7, 100, 5), reply(111, 7, 101, 6), reply(112, 7, 102, 2)]
    tweets += [events.TweetPosted(113, 8, "u8", "", 110, 7, repost_of_reply_to=5)]
    tweets += [reply(120, 1, 110, 7), events.TweetPosted(121, 1, "u1", "hi")]
    writer.send(network + tweets)
    store = store_for(config)
    written = {}
    for broadcast_ids in (10**6, 0):
        rebuild = quiet_rebuild(spark, config, store, tmp_path, broadcast_ids=broadcast_ids)
        decoded = rebuild.read(rebuild.snapshot())
        states, inputs = rebuild.join(decoded)
        generation = store.new_generation(state="building")
        lengths = rebuild.write(generation, states, inputs)
        users = [u for u in sorted(lengths) if u > 0]
        views = store.timelines(generation, users)

        def got(key: Callable[[int, int], str]) -> dict[int, bytes]:
            found = {u: redis_client.get(key(generation, u)) for u in range(1, 9)}  # noqa: B023
            return {u: v for u, v in found.items() if v is not None}

        written[broadcast_ids] = (
            {u: unpack_timeline(redis_client.get(keys.timeline(generation, u))) for u in users},
            {u: v.ids if v else None for u, v in zip(users, views, strict=True)},
            got(keys.aside),
            got(keys.shown_replies),
            got(keys.followees),
            got(keys.list_answers),
            rebuild.summary.short,
        )
    assert written[10**6] == written[0]
    timelines, views, aside, shown, followees, answers, short = written[0]
    # 2 follows 7, 6 and 8, not 5: 7's reply to 5 is aside (its repost by 8
    # shows), its reply to 6 shows, its reply to 2 too; the cap counts the aside.
    assert timelines[2] == (110, [111, 112, 113]) and views[2] == [113, 112, 111]
    assert aside[2] == pack_ids([5, 110]) and shown[2] == pack_ids([6, 111])
    # 3 follows 7 and 1 (pulled), none whom 7 answers: all aside (in entry
    # order); it sees 1's reply to 7. 4 does not follow 7: it does not see it.
    assert timelines[3] == (0, []) and aside[3] == pack_ids([5, 110, 6, 111, 2, 112])
    assert views[3] == [121, 120] and views[4] == [121]
    # 6 hides 5: 7's reply to 5 is left out; 7's reply to 6 shows.
    assert timelines[6] == (0, [101, 111]) and aside[6] == pack_ids([2, 112])
    assert views[6] == [121, 120, 111]
    assert followees == {
        2: pack_ids([6, 7, 8]), 3: pack_ids([1, 7]), 4: pack_ids([1]), 5: pack_ids([1]),
        6: pack_ids([1, 7]),
    }  # fmt: skip
    assert answers == {1: pack_ids([120, 7])} and short == 0

    # The dry run's comparison with the generation just written, as live.
    store.switch(generation, store.active_generation())
    rebuild.diff(states, inputs)
    assert rebuild.summary.differing == 0 and rebuild.summary.live_missing == 0
    decoded.unpersist()


def test_mentions_timelines_written_alike_either_way_and_verified(
    spark, kafka_bootstrap: str, redis_url: str, redis_client, tmp_path: Path
) -> None:
    """docs/decisions.md D30: beside each user u's timeline its mentions
    timeline, owner -u, in u's keys: the newest cap + slack posts by others
    that name u or answer one of u's posts, leaving out the authors u's
    filter holds, its horizon the oldest kept when older ones were cut;
    posts only (no pairs, no replies aside, no filter or followees of its
    own); an idle user's dropped with its timeline. The same whether the
    write tasks join the kept ids themselves or Spark does, and verified by
    its length as the timelines are."""
    config: StarlingConfig = make_config(
        kafka_bootstrap, redis_url, partitions=2, timeline_size=3, timeline_slack=1,
        pull_threshold=3,
    )  # fmt: skip
    writer = ChangelogWriter(config)
    network = [events.Followed(u, u) for u in range(1, 8)]
    network += [events.Followed(2, 3), events.Followed(4, 5), events.FiltersSet(2, (5,))]

    def post(t: int, author: int, *named: int) -> events.TweetPosted:
        names = tuple(f"u{u}" for u in named)
        return events.TweetPosted(
            t, author, f"u{author}", "hi", mentions=named, mention_names=names
        )

    tweets = [post(100 + i, 3, 2) for i in range(5)]  # 3 names 2 five times
    tweets += [post(105, 3)]
    tweets += [post(110, 5, 2, 4), post(111, 2, 4), post(140, 1, 6)]  # 2 hides 5
    tweets += [
        events.TweetPosted(
            120, 4, "u4", "re", in_reply_to=105, reply_to=3, reply_to_name="u3", mentions=(7,),
            mention_names=("u7",),
        ),
        events.TweetPosted(130, 6, "u6", "", 110, 5),  # a repost: no one's mention
    ]  # fmt: skip
    writer.send(network + tweets + [events.TweetDeleted(105, 3)])  # 120 still answers 3
    store = store_for(config)
    live = store.new_generation(state="building")
    store.write_dropped(live, [6])  # 6 is idle
    store.switch(live, store.active_generation())
    users = range(1, 8)
    written = {}
    for broadcast_ids in (10**6, 0):
        rebuild = quiet_rebuild(spark, config, store, tmp_path, broadcast_ids=broadcast_ids)
        decoded = rebuild.read(rebuild.snapshot())
        states, inputs = rebuild.join(decoded)
        generation = store.new_generation(state="building")
        lengths = rebuild.write(generation, states, inputs)
        rebuild.verify(generation, lengths)
        decoded.unpersist()
        mine = {  # every key of -u but its timeline's
            key(generation, -u)
            for u in users
            for key in (
                keys.timeline_reposts, keys.aside, keys.shown_replies, keys.followees,
                keys.filters, keys.pulls,
            )
        }  # fmt: skip
        written[broadcast_ids] = (
            lengths,
            {-u: redis_client.get(keys.timeline(generation, -u)) for u in users},
            [t.ids if t else None for t in store.timelines(generation, [-u for u in users])],
            sum(redis_client.exists(k) for k in mine),
            (rebuild.summary.mentions, rebuild.summary.mention_entries),
        )
    assert written[10**6] == written[0]
    lengths, timelines, reads, others, counted = written[0]
    assert {u: n for u, n in lengths.items() if u < 0} == {
        -1: 0, -2: 4, -3: 1, -4: 2, -5: 0, -6: -1, -7: 1,
    }  # fmt: skip
    assert lengths[6] == -1 and store.dropped(generation, [6, -6]) == {6, -6}
    # 3's five posts naming 2, the newest four kept: their horizon the oldest
    # of them; 5's post naming 2 left out (2 hides 5), not 4's.
    assert {u: unpack_timeline(p) for u, p in timelines.items() if u != -6} == {
        -1: (0, []), -2: (101, [101, 102, 103, 104]), -3: (0, [120]), -4: (0, [110, 111]),
        -5: (0, []), -7: (0, [120]),
    }  # fmt: skip
    assert reads[1] == [104, 103, 102] and reads[3] == [111, 110]  # read as a timeline: the cap
    assert others == 0 and counted == (6, 8)
    # A mentions timeline of another length than computed fails the rebuild.
    with pytest.raises(RebuildFailed, match="do not have the computed length"):
        rebuild.verify(generation, {**lengths, -2: 3})


def test_lists_written_alike_either_way_an_idle_owners_dropped_and_no_mentions_of_theirs(
    spark, kafka_bootstrap: str, redis_url: str, redis_client, tmp_path: Path
) -> None:
    """docs/decisions.md D31: a list (owner -L) is rebuilt as a home timeline
    whose follows are its members (a muted one in its followees only), screened by
    its own filter copy but for its owner's own entries; its followees
    (``tf:``) are its members, its replies to non-members aside; its
    memberships count toward the pull threshold; it has no mentions
    timeline (no "-(-L)"); an idle owner's lists stay dropped. The same
    whether the write tasks join the kept ids themselves or Spark does, and
    verified by its length."""
    config: StarlingConfig = make_config(
        kafka_bootstrap, redis_url, partitions=2, timeline_size=3, timeline_slack=1,
        pull_threshold=3,
    )  # fmt: skip
    mine = owners.list_owner(owners.list_id(1, 1))  # 1's list
    idle = owners.list_owner(owners.list_id(6, 2))  # 6's list: 6 is idle
    writer = ChangelogWriter(config)
    network = [events.Followed(u, u) for u in range(1, 7)]
    network += [events.Followed(mine, m) for m in (1, 2, 4)]
    network += [events.Followed(mine, 3, muted=True), events.Followed(idle, 2)]
    network += [events.Followed(5, 2)]  # 2: 5 and two lists follow it, pulled
    network += [events.FiltersSet(mine, (3, 5)), events.FiltersSet(1, (3, 5))]

    def reply(t: int, author: int, parent: int, to: int) -> events.TweetPosted:
        return events.TweetPosted(
            t, author, f"u{author}", "re", in_reply_to=parent, reply_to=to, reply_to_name="x"
        )

    tweets = [
        events.TweetPosted(100, 3, "u3", "hi"),
        events.TweetPosted(101, 5, "u5", "hi"),
        events.TweetPosted(102, 2, "u2", "hi"),
        events.TweetPosted(103, 2, "u2", "", 100, 3),  # 2's repost of 3's: screened
        events.TweetPosted(104, 1, "u1", "", 101, 5),  # 1's own repost of 5's: kept
        reply(105, 1, 100, 3),  # 1's own reply to 3 (hidden, a member still): shows
        reply(106, 2, 101, 5),  # 2's reply to 5 (hidden): left out
        reply(107, 4, 102, 2),  # to a member: shows
        events.TweetPosted(108, 4, "u4", "hi"),
    ]
    writer.send([*network, *tweets, events.Followed(mine, 6), events.Unfollowed(mine, 6)])
    store = store_for(config)
    live = store.new_generation(state="building")
    store.write_dropped(live, [6])  # 6 is idle
    store.switch(live, store.active_generation())
    beside_keys = (
        ("aside", keys.aside), ("shown", keys.shown_replies), ("followees", keys.followees),
        ("filters", keys.filters),
    )  # fmt: skip
    written = {}
    for broadcast_ids in (10**6, 0):
        rebuild = quiet_rebuild(spark, config, store, tmp_path, broadcast_ids=broadcast_ids)
        decoded = rebuild.read(rebuild.snapshot())
        states, inputs = rebuild.join(decoded)
        generation = store.new_generation(state="building")
        lengths = rebuild.write(generation, states, inputs)
        rebuild.verify(generation, lengths)
        decoded.unpersist()
        summary = rebuild.summary
        written[broadcast_ids] = (
            lengths,
            {o: redis_client.get(keys.timeline(generation, o)) for o in (mine, idle, -mine, -idle)},
            {name: redis_client.get(key(generation, mine)) for name, key in beside_keys},
            redis_client.smembers(keys.pulls(generation, mine)),
            (summary.timelines, summary.mentions, summary.lists, summary.lists_dropped),
            summary.list_entries,
        )
    assert written[10**6] == written[0]
    lengths, timelines, beside, pulls, counts, list_entries = written[0]
    assert {o for o in lengths if owners.is_list(o)} == {mine, idle}
    assert -mine not in lengths and -idle not in lengths  # no "-(-L)"
    assert timelines[-mine] is None and timelines[-idle] is None
    assert lengths[idle] == -1 and store.dropped(generation, [6, -6, idle]) == {6, -6, idle}
    # 2 is pulled (5 and the two lists: 3 followers): read from its list.
    assert pulls == {b"2"}
    assert unpack_timeline(timelines[mine]) == (0, [104, 105, 107, 108])
    assert beside["aside"] is None and beside["shown"] == pack_ids([3, 105, 2, 107])
    assert beside["followees"] == pack_ids([1, 2, 3, 4]) and beside["filters"] is not None
    assert counts == (5, 5, 1, 1) and list_entries == 4
