"""A random workload through the HTTP API; afterwards every home timeline in
Redis must equal the join computed by SQL over the database (the oracle)."""

from __future__ import annotations

import random

import pytest

from tests.support.oracle import (
    Workload,
    check_against_oracle,
    check_lists,
    come_back,
    go_idle,
    pulled_authors,
    read_while_dropped,
)
from tests.support.stack import PULL_THRESHOLD, Stack

pytestmark = pytest.mark.spark


def test_random_workload_matches_the_sql_join(stack: Stack) -> None:
    """Tweets, deletes, follows and unfollows at random, past the cap, with
    reposts (of tweets and of reposts), undone reposts, likes and unlikes,
    replies (to tweets, replies and reposts; some of them, or their
    parents, deleted later), blocks, mutes, their undoing and follows'
    reposts turned off and on;
    posts naming other users (their mentions timelines); lists made, their
    members added and removed, some lists deleted;
    the most followed authors are pulled at read time, some crossing the
    threshold both ways; a fifth of the users go idle half-way (their
    timelines dropped: no fan-out), and half of those come back while the
    writes go on. Every home, mentions and list timeline and every tweet's
    counts equal the SQL, and a deleted list leaves no key."""
    work = Workload(
        stack,
        random.Random(2026),
        prefix="w",
        suspensions=0.01,
        engagements=0.25,
        relations=0.06,
        replies=0.08,
        lists=0.05,
    )
    work.register(200)
    work.run(1500)
    stack.wait_for_seq(work.max_seq)
    idle = sorted(set(work.users) - work.suspended - {"wmod"})[1::5]
    back, away = idle[::2], idle[1::2]
    go_idle(stack, idle)
    work.protected |= set(idle)  # idle users are read below: not suspended meanwhile

    def reads(i: int) -> None:
        if i == 700:  # a read: the database answers while the timeline is regenerated
            for name in back:
                read_while_dropped(stack, name, work.users[name])

    work.run(1500, on_write=reads)
    assert sum(work.counts.values()) >= 2800
    assert min(work.counts[k] for k in ("tweet", "delete", "follow", "unfollow")) > 100
    assert min(work.counts[k] for k in ("repost", "unrepost", "like", "unlike", "reply")) > 20
    assert (
        min(work.counts.get(k, 0) for k in ("block", "unblock", "mute", "unmute", "reposts_off"))
        > 5
    )
    # Suspensions and reinstatements too: the view is of the visible rows.
    assert work.moderated.get("suspend", 0) > 3 and work.moderated.get("reinstate", 0) > 3
    pushed_back = push_back(stack, work)
    stack.settle()
    active = sorted(set(work.users) - set(away))
    stats = check_against_oracle(stack, active)
    assert stats["timelines"] == len(active) and stats["entries"] > 1500
    assert stats["with_horizon"] > 0 and stats["at_the_cap"] > 0  # the cap was reached
    assert stats["counted"] > 100 and stats["answered"] > 20
    assert stats["mentions"] > 20 and stats["mentions_entries"] > 100
    lists = check_lists(stack, work.deleted_lists)
    print(f"\nlists: {lists}, {len(work.owned)} lists, {len(work.deleted_lists)} deleted")
    assert lists["lists"] >= 5 and lists["lists_entries"] > 50 and work.deleted_lists
    assert work.counts["list"] >= 5
    assert min(work.counts.get(k, 0) for k in ("member_add", "member_remove")) > 5, work.counts
    store, ids = stack.store, dict(stack.sql("SELECT username, id FROM feed_user"))
    generation = store.active_generation()
    assert generation is not None
    assert all(store.timeline(generation, ids[name]) is None for name in away)
    watermark = store.watermark(generation)
    skipped = watermark.counters.get("skipped", 0) if watermark else 0
    assert skipped > 0  # writes the idle users' timelines did not get
    come_back(stack, {name: work.users[name] for name in away})  # after the writes, too
    listed, pulled = pulled_authors(stack)
    assert pulled and pushed_back in listed - pulled  # pulled, and one went back to push
    print(
        f"\noracle check: {stats}, {lists}, writes {work.counts}, {work.moderated}, "
        f"{len(idle)} idle, {skipped} skipped, "
        f"{len(pulled)} authors pulled, {len(listed - pulled)} pulled then pushed again"
    )


def push_back(stack: Stack, work: Workload) -> int:
    """The least followed pulled author leaves every list it is in and loses
    followers until it is pushed again (below nine tenths of the threshold:
    the join counts its followers and the lists it is in); returns its id."""
    _, pulled = pulled_authors(stack)
    ids = dict(stack.sql("SELECT username, id FROM feed_user"))
    audience: dict[str, list[str]] = {}
    for follower, followee in sorted(work.follows):
        if ids[followee] in pulled:
            audience.setdefault(followee, []).append(follower)
    keep = (PULL_THRESHOLD * 9 - 1) // 10  # followers left: below nine tenths
    # Suspended followers still follow (the join counts them) but cannot unfollow,
    # nor can a suspended owner take the author off a list.
    able = {
        n: [f for f in fs if f not in work.suspended]
        for n, fs in audience.items()
        if len([f for f in fs if f not in work.suspended]) >= len(fs) - keep
        and not any(n in ms and o in work.suspended for o, ms in work.owned.values())
    }
    name = min(able, key=lambda n: len(audience[n]))
    for list_, (owner, members) in sorted(work.owned.items()):
        if name in members:
            members.discard(name)
            work.call("DELETE", f"/lists/{list_}/members/{name}", owner)
    for follower in able[name][: len(audience[name]) - keep]:
        work.follows.discard((follower, name))
        work.call("DELETE", f"/users/{name}/follow", follower)
    return ids[name]


def test_fanout_job_killed_mid_workload_recovers_from_its_checkpoint(stack: Stack) -> None:
    work = Workload(stack, random.Random(7), prefix="k")
    work.register(120)

    def chaos(i: int) -> None:
        if i == 700:
            stack.kill("fanout")  # SIGKILL: no chance to finish the micro-batch
        elif i == 1200:
            stack.start_fanout()

    work.run(2000, on_write=chaos)
    stack.wait_for_seq(work.max_seq)
    stats = check_against_oracle(stack, sorted(work.users))
    assert stats["timelines"] == 120
    print(f"\nafter SIGKILL and restart: {stats}")
